#include "hugepages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace syncopate {

void adviseHugePages(void *p, std::size_t bytes)
{
#ifdef MADV_HUGEPAGE
    const auto begin = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t lo = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    const std::uintptr_t hi = (begin + bytes) / kHugePageBytes * kHugePageBytes;
    if (p && hi > lo)
        (void)::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_HUGEPAGE); // advice only
#else
    (void)p;
    (void)bytes;
#endif
}

void *allocateZeroed(std::size_t bytes)
{
    if (bytes == 0)
        return nullptr;
    // Half a huge page and more: rounded up to whole ones (at most half wasted, and only below
    // 2 MiB; a model's buffers are few). Smaller buffers share pages as malloc places them.
    const bool huge = bytes >= kHugePageBytes / 2;
    const std::size_t align = huge ? kHugePageBytes : 64;
    const std::size_t rounded = (bytes + align - 1) / align * align;
    void *p = std::aligned_alloc(align, rounded);
    if (!p)
        return nullptr;
    if (huge)
        adviseHugePages(p, rounded);
    std::memset(p, 0, rounded);
    return p;
}

} // namespace syncopate
