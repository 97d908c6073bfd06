// PyTorch profiler (Kineto) trace files read into compact per-event structs (kineto_read.h).
//
// Reading. A file is plain or gzipped JSON (gzip told by its magic bytes 1f 8b, not its name),
// inflated 256 KiB at a time and fed to nlohmann's SAX parser: only the fields used are kept
// from each event, in compact structs, so memory grows with the events kept, never with the
// text. Chrome trace "ts" and "dur" are microseconds whatever "displayTimeUnit" says (that key
// only picks the unit the viewer displays), so it is never used to rescale. They are read from
// the number's text into int64 ns (a double holds epoch microseconds only to 0.25 us).
// "baseTimeNanoseconds" (newer Kineto) is the epoch the ts are relative to, added to every time
// so that the ranks' files share one absolute clock.
#include "kineto_read.h"

#include "kineto.h"
#include "trace.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <istream>
#include <streambuf>

namespace syncopate::kineto_detail {
namespace {

// ---------------------------------------------------------------------------------------------
// Bytes in: a file as JSON text, gzip inflated on the fly.

class TraceBuf : public std::streambuf {
public:
    explicit TraceBuf(const std::string &path) : m_out(std::size_t(1) << 18)
    {
        m_file = std::fopen(path.c_str(), "rb");
        if (!m_file)
            throw ImportError(path + ": cannot open (" + std::strerror(errno) + ")");
        unsigned char magic[2] = {0, 0};
        m_gzip = std::fread(magic, 1, 2, m_file) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
        std::fseek(m_file, 0, SEEK_SET);
        if (m_gzip) {
            m_in.resize(std::size_t(1) << 16);
            if (inflateInit2(&m_z, 15 + 16) != Z_OK) {
                std::fclose(m_file);
                throw ImportError(path + ": cannot start inflating");
            }
        }
    }
    ~TraceBuf() override
    {
        if (m_gzip)
            inflateEnd(&m_z);
        std::fclose(m_file);
    }
    TraceBuf(const TraceBuf &) = delete;
    TraceBuf &operator=(const TraceBuf &) = delete;
    bool gzip() const { return m_gzip; }
    // Set when the bytes ended badly; the parser then sees the end of input.
    const std::string &error() const { return m_error; }

protected:
    int_type underflow() override
    {
        if (gptr() < egptr())
            return traits_type::to_int_type(*gptr());
        std::size_t n = 0;
        if (m_gzip) {
            n = inflateSome();
        } else {
            n = std::fread(m_out.data(), 1, m_out.size(), m_file);
            if (n == 0 && std::ferror(m_file))
                m_error = std::string("read error (") + std::strerror(errno) + ")";
        }
        if (n == 0)
            return traits_type::eof();
        setg(m_out.data(), m_out.data(), m_out.data() + n);
        return traits_type::to_int_type(*gptr());
    }

private:
    bool refill()
    {
        const std::size_t n = std::fread(m_in.data(), 1, m_in.size(), m_file);
        m_compressed += n;
        m_z.next_in = reinterpret_cast<Bytef *>(m_in.data());
        m_z.avail_in = uInt(n);
        return n > 0;
    }
    std::size_t inflateSome()
    {
        for (;;) {
            if (m_ended) {
                // Concatenated members are one stream (gzip -c a b); anything else after the
                // end is ignored, as gzip does.
                if (m_z.avail_in == 0 && !refill())
                    return 0;
                if (m_z.next_in[0] != 0x1f)
                    return 0;
                inflateReset(&m_z);
                m_ended = false;
            }
            if (m_z.avail_in == 0 && !refill()) {
                m_error = "truncated gzip: the compressed data ends after " +
                          std::to_string(m_compressed) + " bytes, before its end marker";
                return 0;
            }
            m_z.next_out = reinterpret_cast<Bytef *>(m_out.data());
            m_z.avail_out = uInt(m_out.size());
            const int rc = inflate(&m_z, Z_NO_FLUSH);
            const std::size_t produced = m_out.size() - m_z.avail_out;
            if (rc == Z_STREAM_END)
                m_ended = true;
            else if (rc != Z_OK && rc != Z_BUF_ERROR) {
                m_error = std::string("damaged gzip data (") + (m_z.msg ? m_z.msg : "inflate failed") + ")";
                return 0;
            }
            if (produced > 0)
                return produced;
        }
    }

    std::FILE *m_file = nullptr;
    bool m_gzip = false, m_ended = false;
    z_stream m_z{};
    std::vector<char> m_in, m_out;
    std::size_t m_compressed = 0;
    std::string m_error;
};

// ---------------------------------------------------------------------------------------------
// Names and sizes, as the SAX handler files events.

bool startsWith(const std::string &s, const char *p) { return s.rfind(p, 0) == 0; }
bool containsNoCase(const std::string &s, const char *needle)
{
    const std::size_t n = std::strlen(needle);
    if (s.size() < n)
        return false;
    for (std::size_t i = 0; i + n <= s.size(); ++i) {
        std::size_t k = 0;
        while (k < n && std::tolower(static_cast<unsigned char>(s[i + k])) == needle[k])
            ++k;
        if (k == n)
            return true;
    }
    return false;
}

int classify(const std::string &name)
{
    if (startsWith(name, "autograd::") || containsNoCase(name, "backward"))
        return Backward; // also covers "autograd::engine::evaluate_function: ..."
    if (startsWith(name, "Optimizer.") || containsNoCase(name, "optimizer") || containsNoCase(name, "zero_grad"))
        return Optimizer;
    if (containsNoCase(name, "forward") || startsWith(name, "nn.Module:"))
        return Forward;
    return -1;
}

double dtypeBytes(const std::string &t)
{
    static const std::map<std::string, double> sizes = {
        {"Float", 4}, {"Double", 8}, {"Half", 2}, {"BFloat16", 2}, {"Int", 4}, {"Long", 8},
        {"Short", 2}, {"Char", 1}, {"Byte", 1}, {"Bool", 1}, {"ComplexFloat", 8},
        {"ComplexDouble", 16}, {"ComplexHalf", 4}, {"Float8_e4m3fn", 1}, {"Float8_e5m2", 1},
        {"Float8_e4m3fnuz", 1}, {"Float8_e5m2fnuz", 1}, {"UInt16", 2}, {"UInt32", 4}, {"UInt64", 8}};
    const auto it = sizes.find(t);
    return it == sizes.end() ? 0 : it->second;
}

// ---------------------------------------------------------------------------------------------
// The SAX handler: a stack of what each open container is, so only the fields used are kept.

class TraceSax final : public nlohmann::json::json_sax_t {
public:
    TraceSax(FileData &out, GroupTable &groups) : m_out(out), m_groups(groups) {}

    std::size_t errorPos = 0;
    std::string errorWhat;

    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t v) override { return number(true, v, double(v), nullptr); }
    bool number_unsigned(number_unsigned_t v) override
    {
        if (v <= number_unsigned_t(std::numeric_limits<long long>::max()))
            return number(true, (long long)v, double(v), nullptr);
        return number(false, 0, double(v), nullptr);
    }
    bool number_float(number_float_t v, const string_t &raw) override { return number(false, 0, v, &raw); }
    bool string(string_t &s) override;
    bool binary(binary_t &) override { return true; }
    bool start_object(std::size_t) override { return open(true); }
    bool end_object() override { return close(); }
    bool start_array(std::size_t) override { return open(false); }
    bool end_array() override { return close(); }
    bool key(string_t &k) override;
    bool parse_error(std::size_t pos, const std::string &, const nlohmann::detail::exception &ex) override
    {
        errorPos = pos;
        errorWhat = ex.what();
        return false;
    }

private:
    enum class Ctx : std::uint8_t { Top, Events, Event, Args, Dist, Skip };
    enum class Key : std::uint8_t {
        Other, TraceEvents, DistInfo, BaseTime, Ph, Cat, Name, Pid, Tid, Ts, Dur, Args, Rank,
        World, Backend, Corr, PgName, PgId, Seq, InN, OutN, Dtype, Stream
    };
    struct Level {
        Ctx ctx;
        Key key = Key::Other;
    };
    struct Scratch {
        std::string ph, cat, name, pgName, dtype;
        bool hasTs = false, hasDur = false, hasCorr = false, hasSeq = false, hasPgId = false,
             hasStream = false, numericIds = true;
        Ns ts = 0, dur = 0;
        long long pid = 0, tid = 0, corr = 0, seq = 0, pgId = 0, stream = 0;
        double inN = 0, outN = 0;
        void reset()
        {
            ph.clear(), cat.clear(), name.clear(), pgName.clear(), dtype.clear();
            hasTs = hasDur = hasCorr = hasSeq = hasPgId = hasStream = false;
            numericIds = true;
            ts = dur = 0;
            pid = tid = corr = seq = pgId = stream = 0;
            inN = outN = 0;
        }
    };

    bool open(bool object)
    {
        Ctx c = Ctx::Skip;
        if (m_stack.empty()) {
            c = object ? Ctx::Top : Ctx::Events; // a bare array is Chrome's array format
        } else {
            const Level &p = m_stack.back();
            if (p.ctx == Ctx::Top && p.key == Key::TraceEvents && !object)
                c = Ctx::Events;
            else if (p.ctx == Ctx::Top && p.key == Key::DistInfo && object)
                c = Ctx::Dist;
            else if (p.ctx == Ctx::Events && object)
                c = Ctx::Event;
            else if (p.ctx == Ctx::Event && p.key == Key::Args && object)
                c = Ctx::Args;
        }
        if (c == Ctx::Events)
            m_out.sawEvents = true;
        if (c == Ctx::Event)
            m_ev.reset();
        m_stack.push_back({c});
        return true;
    }
    bool close()
    {
        const Ctx c = m_stack.back().ctx;
        m_stack.pop_back();
        if (c == Ctx::Event)
            finishEvent();
        return true;
    }
    static bool microsToNs(bool integral, long long i, double d, const std::string *raw, Ns &out);
    bool number(bool integral, long long i, double d, const std::string *raw);
    std::uint32_t thread(long long pid, long long tid);
    void finishEvent();

    FileData &m_out;
    GroupTable &m_groups;
    std::vector<Level> m_stack;
    Scratch m_ev;
    long long m_index = 0;
    std::map<std::pair<long long, long long>, std::uint32_t> m_threadIds;
    std::pair<long long, long long> m_lastThread{0, 0};
    std::uint32_t m_lastThreadId = std::numeric_limits<std::uint32_t>::max();
};

bool TraceSax::key(string_t &k)
{
    Level &l = m_stack.back();
    Key r = Key::Other;
    switch (l.ctx) {
    case Ctx::Top:
        r = k == "traceEvents" ? Key::TraceEvents : k == "distributedInfo" ? Key::DistInfo
            : k == "baseTimeNanoseconds" ? Key::BaseTime : Key::Other;
        break;
    case Ctx::Dist:
        r = k == "rank" ? Key::Rank : k == "world_size" ? Key::World : k == "backend" ? Key::Backend : Key::Other;
        break;
    case Ctx::Event:
        if (k.size() == 2)
            r = k == "ph" ? Key::Ph : k == "ts" ? Key::Ts : Key::Other;
        else if (k.size() == 3)
            r = k == "cat" ? Key::Cat : k == "pid" ? Key::Pid : k == "tid" ? Key::Tid : k == "dur" ? Key::Dur : Key::Other;
        else if (k.size() == 4)
            r = k == "name" ? Key::Name : k == "args" ? Key::Args : Key::Other;
        break;
    case Ctx::Args:
        r = k == "correlation" ? Key::Corr
            : (k == "Process Group Name" || k == "pg_name") ? Key::PgName
            : (k == "Process Group ID" || k == "pg_id") ? Key::PgId
            : (k == "Seq" || k == "seq") ? Key::Seq
            : k == "In msg nelems" ? Key::InN : k == "Out msg nelems" ? Key::OutN
            : k == "dtype" ? Key::Dtype : k == "stream" ? Key::Stream : Key::Other;
        break;
    default:
        break;
    }
    l.key = r;
    return true;
}

bool TraceSax::string(string_t &s)
{
    const Level &l = m_stack.empty() ? Level{Ctx::Skip} : m_stack.back();
    if (l.ctx == Ctx::Event) {
        switch (l.key) {
        case Key::Ph: m_ev.ph = s; break;
        case Key::Cat: m_ev.cat = s; break;
        case Key::Name: m_ev.name = s; break;
        case Key::Pid: case Key::Tid: m_ev.numericIds = false; break;
        default: break;
        }
    } else if (l.ctx == Ctx::Args) {
        if (l.key == Key::PgName || (l.key == Key::PgId && m_ev.pgName.empty()))
            m_ev.pgName = s;
        else if (l.key == Key::Dtype)
            m_ev.dtype = s;
        else if (l.key == Key::Seq) {
            char *end = nullptr;
            const long long v = std::strtoll(s.c_str(), &end, 10);
            if (end && *end == 0 && !s.empty())
                m_ev.seq = v, m_ev.hasSeq = true;
        }
    } else if (l.ctx == Ctx::Dist && l.key == Key::Backend) {
        m_out.backend = s;
    } else if (l.ctx == Ctx::Dist && (l.key == Key::Rank || l.key == Key::World)) {
        // "rank": "1", as some writers quote it: a number all the same.
        char *end = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end && *end == 0 && errno == 0) {
            if (l.key == Key::Rank)
                m_out.rank = v, m_out.hasRank = true;
            else
                m_out.world = v, m_out.hasWorld = true;
        }
    }
    return true;
}

// "1661938466265032", "4203669603187.439": exact to the ns from the text; else via the double.
bool TraceSax::microsToNs(bool integral, long long i, double d, const std::string *raw, Ns &out)
{
    // 4e18 ns either way (year 2096 as epoch time): a time plus a duration plus a base time
    // stays inside int64, and so does any difference of two of them.
    constexpr long long kMaxUs = 4'000'000'000'000'000;
    if (integral) {
        if (i > kMaxUs || i < -kMaxUs)
            return false;
        out = i * 1000;
        return true;
    }
    if (raw) {
        const std::string &s = *raw;
        std::size_t p = 0;
        const bool neg = !s.empty() && s[0] == '-';
        p += neg;
        long long whole = 0, frac = 0;
        int digits = 0, fracDigits = 0;
        bool roundUp = false;
        for (; p < s.size() && std::isdigit(static_cast<unsigned char>(s[p])); ++p, ++digits)
            if (digits < 18)
                whole = whole * 10 + (s[p] - '0');
        if (p < s.size() && s[p] == '.')
            for (++p; p < s.size() && std::isdigit(static_cast<unsigned char>(s[p])); ++p, ++fracDigits) {
                if (fracDigits < 3)
                    frac = frac * 10 + (s[p] - '0');
                else if (fracDigits == 3)
                    roundUp = s[p] >= '5';
            }
        const bool ok = p == s.size() && digits > 0 && digits <= 18 && whole <= kMaxUs;
        if (ok) {
            for (int k = fracDigits; k < 3; ++k)
                frac *= 10;
            const Ns v = whole * 1000 + frac + (roundUp ? 1 : 0);
            out = neg ? -v : v;
            return true;
        }
    }
    if (!std::isfinite(d) || std::abs(d) > double(kMaxUs))
        return false;
    out = Ns(std::llround(d * 1000.0));
    return true;
}

bool TraceSax::number(bool integral, long long i, double d, const std::string *raw)
{
    const Level &l = m_stack.empty() ? Level{Ctx::Skip} : m_stack.back();
    const long long asInt = integral ? i : (std::isfinite(d) && std::abs(d) < 9e18 ? (long long)d : 0);
    switch (l.ctx) {
    case Ctx::Top:
        if (l.key == Key::BaseTime) {
            // A float is taken when it is a time (9e18 was read as 0, the trace left unaligned).
            const bool inRange = integral || (std::isfinite(d) && std::abs(d) <= 4e18);
            m_out.baseNs = integral ? i : inRange ? Ns(std::llround(d)) : std::numeric_limits<Ns>::max();
            if (!inRange)
                m_out.baseText = raw ? *raw : std::to_string(d);
        }
        break;
    case Ctx::Dist:
        if (l.key == Key::Rank)
            m_out.rank = asInt, m_out.hasRank = true;
        else if (l.key == Key::World)
            m_out.world = asInt, m_out.hasWorld = true;
        break;
    case Ctx::Event:
        if (l.key == Key::Ts)
            m_ev.hasTs = microsToNs(integral, i, d, raw, m_ev.ts);
        else if (l.key == Key::Dur)
            m_ev.hasDur = microsToNs(integral, i, d, raw, m_ev.dur);
        else if (l.key == Key::Pid)
            m_ev.pid = asInt;
        else if (l.key == Key::Tid)
            m_ev.tid = asInt;
        break;
    case Ctx::Args:
        switch (l.key) {
        case Key::Corr: m_ev.corr = asInt, m_ev.hasCorr = true; break;
        case Key::Seq: m_ev.seq = asInt, m_ev.hasSeq = true; break;
        case Key::PgId: m_ev.pgId = asInt, m_ev.hasPgId = true; break;
        case Key::InN: m_ev.inN = d; break;
        case Key::OutN: m_ev.outN = d; break;
        case Key::Stream: m_ev.stream = asInt, m_ev.hasStream = true; break;
        default: break;
        }
        break;
    default:
        break;
    }
    return true;
}

std::uint32_t TraceSax::thread(long long pid, long long tid)
{
    // Events come in runs of one thread: the map is only searched when the thread changes.
    const std::pair<long long, long long> key{pid, tid};
    if (m_lastThreadId != std::numeric_limits<std::uint32_t>::max() && m_lastThread == key)
        return m_lastThreadId;
    const auto [it, fresh] = m_threadIds.emplace(key, std::uint32_t(m_out.threads.size()));
    if (fresh)
        m_out.threads.push_back(key);
    m_lastThread = key;
    m_lastThreadId = it->second;
    return m_lastThreadId;
}

void TraceSax::finishEvent()
{
    ++m_index;
    if (m_ev.ph != "X")
        return;
    if (!m_ev.hasTs)
        throw ImportError(m_out.path + ": event " + std::to_string(m_index) + " (\"" + m_ev.name +
                          "\", ph X) has no ts (or one that is not a number of microseconds within +-4e15)");
    // A complete event without a duration, or with one below zero, is damaged: taken as 0 it
    // made every such kernel vanish from the figures without a word.
    if (!m_ev.hasDur)
        throw ImportError(m_out.path + ": event " + std::to_string(m_index) + " (\"" + m_ev.name +
                          "\", ph X) has no dur (or one that is not a number of microseconds within +-4e15)");
    if (m_ev.dur < 0)
        throw ImportError(m_out.path + ": event " + std::to_string(m_index) + " (\"" + m_ev.name +
                          "\", ph X) has a negative dur, " + std::to_string(m_ev.dur / 1000) + " us");
    if (m_ev.dur > kMaxRunNs)
        throw ImportError(m_out.path + ": event " + std::to_string(m_index) + " (\"" + m_ev.name +
                          "\") lasts " + std::to_string(m_ev.dur / 1000) + " us: longer than a trace can cover (52 days)");
    const Ns start = m_ev.ts, end = start + std::max<Ns>(0, m_ev.dur);
    m_out.first = std::min(m_out.first, start);
    m_out.last = std::max(m_out.last, end);
    if (!m_ev.numericIds)
        return; // Kineto's own "Spans"/"Traces" rows
    const std::string &cat = m_ev.cat, &name = m_ev.name;
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
        const Kind k = cat != "kernel" ? Kind::Copy
                       : (startsWith(name, "ncclKernel") || startsWith(name, "ncclDevKernel")) ? Kind::Nccl
                                                                                               : Kind::Compute;
        m_out.gpu.push_back({start, end, m_ev.corr, m_ev.hasStream ? m_ev.stream : m_ev.tid, m_ev.pid, m_ev.hasCorr, k});
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
        if (m_ev.hasCorr)
            m_out.launches.push_back({m_ev.corr, start, thread(m_ev.pid, m_ev.tid)});
    } else if (cat == "cpu_op" || cat == "user_annotation" || cat == "python_function") {
        const std::uint32_t t = thread(m_ev.pid, m_ev.tid);
        if (startsWith(name, "ProfilerStep#")) {
            const char *digits = name.c_str() + std::strlen("ProfilerStep#");
            char *stop = nullptr;
            errno = 0;
            const long long n = std::strtoll(digits, &stop, 10);
            // Step numbers go into 32 bits on the timeline: a larger one is damage, said.
            if (stop != digits && *stop == 0 && (errno == ERANGE || n > 2'000'000'000))
                throw ImportError(m_out.path + ": event " + std::to_string(m_index) + " (\"" + name +
                                  "\"): a step number past 2000000000");
            if (stop != digits && *stop == 0 && n >= 0)
                m_out.steps.push_back({n, start, end});
            return;
        }
        const int c = classify(name);
        if (c >= 0)
            m_out.classes.push_back({start, end, t, Cls(c)});
        if (cat == "cpu_op") {
            m_out.ops.push_back({start, end, t});
            if (name == "record_param_comms") {
                int pg = -1;
                if (!m_ev.pgName.empty())
                    pg = m_groups.intern(m_ev.pgName);
                else if (m_ev.hasPgId)
                    pg = m_groups.intern(std::to_string(m_ev.pgId));
                const double bytes = std::max(m_ev.inN, m_ev.outN) * dtypeBytes(m_ev.dtype);
                m_out.comms.push_back({start, end, t, pg, m_ev.seq, m_ev.hasSeq && pg >= 0, bytes});
            }
        }
    }
}

} // namespace

FileData parseFile(const std::string &path, GroupTable &groups)
{
    FileData f;
    f.path = path;
    TraceBuf buf(path);
    std::istream in(&buf);
    TraceSax sax(f, groups);
    const bool ok = nlohmann::json::sax_parse(in, &sax);
    if (!buf.error().empty())
        throw ImportError(path + ": " + buf.error());
    if (!ok)
        throw ImportError(path + ": not JSON: at byte " + std::to_string(sax.errorPos) +
                          (buf.gzip() ? " of the inflated text" : "") + ": " + sax.errorWhat);
    if (!f.sawEvents)
        throw ImportError(path + ": no traceEvents array (not a Chrome trace from the PyTorch profiler)");
    if (f.first > f.last) // an empty array, or B/E pairs and instants only
        throw ImportError(path + ": no complete events (ph \"X\") in traceEvents, which is what the PyTorch "
                                 "profiler writes: nothing to import");
    // Longer than a run can hold (2^52 ns, 52 days): damaged, and unwritable as a run folder.
    if (f.first <= f.last && f.last - f.first > kMaxRunNs)
        throw ImportError(path + ": its events span " + std::to_string((f.last - f.first) / 86'400'000'000'000) +
                          " days: more than a trace can cover (52 days)");
    // Streams by (device, id): GpuEvent::stream becomes its index, in that order.
    for (const GpuEvent &g : f.gpu)
        f.streams.emplace_back(g.device, g.stream);
    std::sort(f.streams.begin(), f.streams.end());
    f.streams.erase(std::unique(f.streams.begin(), f.streams.end()), f.streams.end());
    for (GpuEvent &g : f.gpu)
        g.stream = std::lower_bound(f.streams.begin(), f.streams.end(), std::pair(g.device, g.stream)) - f.streams.begin();
    // Every time onto the absolute clock.
    const Ns b = f.baseNs;
    if (b < -4'000'000'000'000'000'000 || b > 4'000'000'000'000'000'000)
        throw ImportError(path + ": baseTimeNanoseconds " + (f.baseText.empty() ? std::to_string(b) : f.baseText) +
                          " is out of range (a time in ns within 4e18 of the epoch expected)");
    if (b != 0 && f.first <= f.last) {
        f.first += b, f.last += b;
        for (auto &s : f.steps) s.start += b, s.end += b;
        for (auto &s : f.ops) s.start += b, s.end += b;
        for (auto &s : f.classes) s.start += b, s.end += b;
        for (auto &s : f.launches) s.ts += b;
        for (auto &s : f.gpu) s.start += b, s.end += b;
        for (auto &s : f.comms) s.start += b, s.end += b;
    }
    return f;
}

} // namespace syncopate::kineto_detail
