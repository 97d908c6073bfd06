// Man pages for syncopate(1) and syncopate-cli(1), written by the hidden `syncopate-cli man` at
// build time: options come from each program's own help text and the key table from
// configKeys(), the table `syncopate-cli keys` prints, so a page cannot drift from its program.
#pragma once

#include <string>

namespace syncopate {

// syncopate-cli(1) from its usage text: the lines up to the first blank one are the synopsis,
// the paragraph after it the description.
std::string cliManPage(const std::string &usage, const std::string &version);

// syncopate(1) from the text of `syncopate --help` (QCommandLineParser's layout).
std::string appManPage(const std::string &help, const std::string &version);

} // namespace syncopate
