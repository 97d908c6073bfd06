#include "benchkernels.h"
