#include "manpage.h"

#include "config.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string_view>
#include <vector>

namespace syncopate {
namespace {

// One line of text for roff: backslashes and minus signs escaped (a plain "-" may print as a
// hyphen that does not paste into a shell), and a leading dot or quote guarded so that roff
// does not read the line as a request.
std::string roff(std::string_view text)
{
    std::string out;
    for (char c : text) {
        if (c == '\\')
            out += "\\e";
        else if (c == '-')
            out += "\\-";
        else
            out += c;
    }
    if (!out.empty() && (out[0] == '.' || out[0] == '\''))
        out.insert(0, "\\&");
    return out;
}

std::vector<std::string> splitLines(const std::string &text)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        out.push_back(line);
    return out;
}

std::string trim(std::string_view s)
{
    const auto b = s.find_first_not_of(' ');
    if (b == std::string_view::npos)
        return {};
    return std::string(s.substr(b, s.find_last_not_of(' ') - b + 1));
}

std::string header(const std::string &name, const std::string &version, const std::string &what)
{
    std::string upper = name;
    for (char &c : upper)
        c = char(std::toupper(static_cast<unsigned char>(c)));
    // No date: the page is the same whenever it is built. No hyphenation: it would split the
    // command and key names that readers copy.
    return ".TH " + roff(upper) + " 1 \"\" \"Syncopate " + version + "\" \"User Commands\"\n" +
           ".nh\n.SH NAME\n" + roff(name) + " \\- " + roff(what) + "\n";
}

std::string number(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

std::string typeOf(const ConfigKey &k)
{
    std::string range;
    if (std::isfinite(k.min) && std::isfinite(k.max))
        range = " from " + number(k.min) + " to " + number(k.max);
    else if (std::isfinite(k.min))
        range = " from " + number(k.min);
    switch (k.type) {
    case KeyType::Int:
        return "integer" + range;
    case KeyType::Number:
        return "number" + range;
    case KeyType::Bool:
        return "true or false";
    case KeyType::String:
        return "string";
    case KeyType::Enum: {
        std::string out = "one of";
        for (std::size_t i = 0; i < k.allowed.size(); ++i)
            out += std::string(i ? ", " : " ") + k.allowed[i];
        return out;
    }
    case KeyType::IntArray:
        return "list of integers" + range;
    case KeyType::NumberArray:
        return "list of numbers" + range;
    }
    return {};
}

std::string keysSection()
{
    std::string out =
        ".SH CONFIG KEYS\n"
        "A run's configuration is a JSON object of these keys, nested at the dots: a config file, "
        "or the \"config\" object of a preset; \\fBsyncopate\\-cli run \\-\\-set\\fR KEY=VALUE sets "
        "one. \\fBsyncopate\\-cli keys\\fR prints the same table.\n";
    for (const ConfigKey &k : configKeys())
        out += ".TP\n.B " + roff(k.name) + "\n" + roff(typeOf(k)) + "; default " +
               roff(k.defaultJson) + ".\n.br\n" + roff(k.help) + "\n";
    return out;
}

std::string commonSections(const char *seeAlso)
{
    return ".SH ENVIRONMENT\n"
           ".TP\n.B SYNCOPATE_PRESETS\n"
           "The folder of presets to use instead of the installed ones.\n"
           ".TP\n.B SYNCOPATE_CUDA_PLUGIN\n"
           "The CUDA backend (libsyncopate_cuda.so) to load instead of the installed one.\n"
           ".SH FILES\n"
           "DATADIR and LIBDIR are the installation's share and library folders.\n"
           ".TP\n.I DATADIR/syncopate/presets\n"
           "The presets, one JSON file each, with a title, a description and a config.\n"
           ".TP\n.I LIBDIR/syncopate/libsyncopate_cuda.so\n"
           "The CUDA backend, where it was built; loaded when a run asks for device = cuda.\n"
           ".SH SEE ALSO\n" +
           std::string(seeAlso) + "\n";
}

} // namespace

std::string cliManPage(const std::string &usage, const std::string &version)
{
    std::string out = header("syncopate-cli", version,
                             "run Syncopate's distributed-training experiments without a window");
    out += ".SH SYNOPSIS\n.nf\n";
    const std::vector<std::string> lines = splitLines(usage);
    std::size_t i = 0;
    for (; i < lines.size() && !lines[i].empty(); ++i)
        if (lines[i] != "usage:")
            out += roff(lines[i]) + "\n";
    out += ".fi\n.SH DESCRIPTION\n"
           "\\fBsyncopate\\-cli\\fR runs the experiments of \\fBsyncopate\\fR(1) without a window, "
           "checks configs and reads run folders.\n.PP\n";
    for (++i; i < lines.size(); ++i)
        out += roff(lines[i]) + "\n";
    return out + keysSection() + commonSections(".BR syncopate (1)");
}

std::string appManPage(const std::string &help, const std::string &version)
{
    const std::vector<std::string> lines = splitLines(help);
    // QCommandLineParser: "Usage: PROGRAM [options]", the description, a blank line,
    // "Options:", then one option per entry, its description wrapped under a fixed column.
    std::string what = lines.size() > 1 ? lines[1] : std::string();
    if (!what.empty() && what.back() == '.')
        what.pop_back();
    if (!what.empty())
        what[0] = char(std::tolower(static_cast<unsigned char>(what[0])));
    std::string out = header("syncopate", version, what);
    out += ".SH SYNOPSIS\n.B syncopate\n[\\fIoptions\\fR]\n"
           ".SH DESCRIPTION\n"
           "\\fBsyncopate\\fR opens a window with the experiment form, the timeline, the charts and "
           "the runs. The form edits the config keys below; \\fBsyncopate\\-cli\\fR(1) runs the "
           "same experiments without a window.\n"
           ".SH OPTIONS\n";
    bool inOptions = false;
    for (const std::string &line : lines) {
        if (line == "Options:") {
            inOptions = true;
            continue;
        }
        if (!inOptions || line.empty())
            continue;
        if (line.size() > 2 && line.compare(0, 3, "  -") == 0) {
            const auto gap = line.find("  ", 2);
            out += ".TP\n\\fB" + roff(trim(line.substr(2, gap - 2))) + "\\fR\n";
            if (gap != std::string::npos)
                out += roff(trim(std::string_view(line).substr(gap))) + "\n";
        } else {
            out += roff(trim(line)) + "\n";
        }
    }
    return out + keysSection() + commonSections(".BR syncopate\\-cli (1)");
}

} // namespace syncopate
