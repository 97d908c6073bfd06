#include "mpicomm.h"

#include "config.h"
#include "model.h"
#include "mpinccl.h"
#include "mpiasync.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <utility>

namespace syncopate {
namespace {

// Tags. Records and "done" share the records communicator, so a rank's "done" arrives after
// every batch it sent before (MPI does not let messages of one sender overtake each other on
// one communicator when the receive matches both).
enum Tag : int { TagRecords = 1, TagDone, TagBeat, TagStop, TagPing, TagPong, TagOffsets, TagFin, TagKnob,
                 TagSyncPing, TagSyncPong };

constexpr int kHostChars = 256;
constexpr int kErrorChars = 4096;
constexpr int kPings = 16;
constexpr int kClockSyncMs = 2000;       // a rank measures its clock again this often
constexpr int kSyncWaitMs = 50;          // for one answer of rank 0 while the run goes
constexpr int kOffsetValues = 7;         // what a rank tells rank 0 of its clock at the end

using Clock = std::chrono::steady_clock;

std::int64_t steadyNs()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}


// A message waiting on c, from anyone with any tag: its status and size in bytes.
bool probe(MPI_Comm c, MPI_Status &st, int &bytes)
{
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c, &flag, &st);
    if (flag)
        MPI_Get_count(&st, MPI_BYTE, &bytes);
    return flag != 0;
}

// NTP-style: this rank sent its time t1, rank 0 answered with its time t2, the answer arrived
// at t3. Rank 0's clock = this clock + t2 - (t1 + t3) / 2, within half the round trip; the
// exchange with the lowest round trip is kept.
struct BestRoundTrip {
    ClockOffset best{0, std::numeric_limits<std::int64_t>::max()};
    std::int64_t mid = 0; // this rank's time in the middle of the best round trip
    void take(std::int64_t t1, std::int64_t t2, std::int64_t t3)
    {
        const std::int64_t half = (t3 - t1) / 2;
        if (half < best.uncertaintyNs) {
            best = {t2 - (t1 + half), half};
            mid = t1 + half;
        }
    }
    bool any() const { return best.uncertaintyNs != std::numeric_limits<std::int64_t>::max(); }
};

} // namespace

struct MpiCommunicator::Comms {
    MPI_Comm grads = MPI_COMM_NULL, records = MPI_COMM_NULL, control = MPI_COMM_NULL,
             eval = MPI_COMM_NULL, clock = MPI_COMM_NULL, async = MPI_COMM_NULL;
    bool anyAbandoned = false; // rank 0: some rank left a collective behind; others: told so
};

struct MpiCommunicator::PendingSend {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<Record> records; // a batch for rank 0
    std::string text;            // a stop's error
};

bool MpiCommunicator::launchedByMpirun()
{
    return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
           std::getenv("PMI_RANK");
}

MpiCommunicator::MpiCommunicator() : m_comms(std::make_unique<Comms>())
{
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (provided < MPI_THREAD_MULTIPLE) {
        MPI_Finalize();
        throw CommError("this MPI library gives no MPI_THREAD_MULTIPLE, which the workers, the "
                        "collector and evaluation need at once (Open MPI gives it)");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &m_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m_ranks);
    for (MPI_Comm *c : {&m_comms->grads, &m_comms->records, &m_comms->control, &m_comms->eval,
                        &m_comms->clock, &m_comms->async})
        MPI_Comm_dup(MPI_COMM_WORLD, c);
    char host[kHostChars] = {};
    std::strncpy(host, hostName().c_str(), kHostChars - 1);
    std::vector<char> all(std::size_t(kHostChars) * std::size_t(m_ranks));
    MPI_Allgather(host, kHostChars, MPI_CHAR, all.data(), kHostChars, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < m_ranks; ++r)
        m_hosts.emplace_back(all.data() + std::size_t(r) * kHostChars);
    m_lastHeard.assign(std::size_t(m_ranks), Clock::now());
    m_doneRanks.assign(std::size_t(m_ranks), false);
    m_startOffsets.assign(std::size_t(m_ranks), ClockOffset{});
    m_endOffsets.assign(std::size_t(m_ranks), ClockOffset{});
    m_fits.assign(std::size_t(m_ranks), ClockFit{});
}

MpiCommunicator::~MpiCommunicator()
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return;
    if (m_abandoned.load() || m_comms->anyAbandoned)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (auto &s : m_sends)
        MPI_Wait(&s->request, MPI_STATUS_IGNORE);
    MPI_Finalize();
}

void MpiCommunicator::end(int exitCode)
{
    std::fflush(stdout);
    std::fflush(stderr);
    if (m_abandoned.load() || m_comms->anyAbandoned) {
        // A collective was left behind: MPI cannot be finalised. Rank 0 has written the run by
        // now and ends the job; the others wait for that (bounded, should rank 0 be gone).
        if (m_rank == 0)
            MPI_Abort(MPI_COMM_WORLD, exitCode ? exitCode : 1);
        std::this_thread::sleep_for(std::chrono::nanoseconds(2 * m_timeoutNs) + std::chrono::seconds(10));
        std::_Exit(exitCode ? exitCode : 1);
    }
    for (auto &s : m_sends)
        MPI_Wait(&s->request, MPI_STATUS_IGNORE);
    m_sends.clear();
    MPI_Finalize();
    std::exit(exitCode);
}

void MpiCommunicator::backoff(int &spins)
{
    ++spins;
    if (spins < 64)
        std::this_thread::yield();
    else
        std::this_thread::sleep_for(std::chrono::microseconds(spins < 1024 ? 20 : 200));
}

bool MpiCommunicator::await(void *request)
{
    auto *r = static_cast<MPI_Request *>(request);
    int done = 0, spins = 0;
    for (;;) {
        MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (done)
            return true;
        if (m_cancelled.load(std::memory_order_relaxed)) {
            m_abandoned = true;
            return false;
        }
        backoff(spins);
    }
}

void MpiCommunicator::setError(const std::string &e)
{
    std::lock_guard lock(m_errorMutex);
    if (m_error.empty())
        m_error = e;
}

std::string MpiCommunicator::error() const
{
    std::lock_guard lock(m_errorMutex);
    return m_error;
}

// ---- readiness and clocks ------------------------------------------------------------------

void MpiCommunicator::agreeReady(const std::string &localError)
{
    std::vector<char> mine(kErrorChars, 0);
    std::strncpy(mine.data(), localError.c_str(), kErrorChars - 1);
    std::vector<char> all(std::size_t(kErrorChars) * std::size_t(m_ranks));
    MPI_Allgather(mine.data(), kErrorChars, MPI_CHAR, all.data(), kErrorChars, MPI_CHAR,
                  MPI_COMM_WORLD);
    for (int r = 0; r < m_ranks; ++r) {
        const char *e = all.data() + std::size_t(r) * kErrorChars;
        if (*e)
            throw CommError(rankName(r) + ": " + e);
    }
    // Every rank built its replicas: the sync group may ask the others now.
    chooseSyncGroup();
}

// kPings round trips with rank 0, one rank after another (BestRoundTrip).
ClockOffset MpiCommunicator::measureOffset(const RunClock &clock, std::int64_t *at, std::int64_t *mid)
{
    if (m_rank == 0) {
        for (int r = 1; r < m_ranks; ++r)
            for (int k = 0; k < kPings; ++k) {
                std::int64_t t1 = 0;
                MPI_Recv(&t1, 1, MPI_INT64_T, r, TagPing, m_comms->clock, MPI_STATUS_IGNORE);
                const std::int64_t t2 = clock.now();
                MPI_Send(&t2, 1, MPI_INT64_T, r, TagPong, m_comms->clock);
            }
        if (at)
            *at = clock.now();
        return {0, 0};
    }
    BestRoundTrip trips;
    for (int k = 0; k < kPings; ++k) {
        const std::int64_t t1 = clock.now();
        std::int64_t t2 = 0;
        MPI_Send(&t1, 1, MPI_INT64_T, 0, TagPing, m_comms->clock);
        MPI_Recv(&t2, 1, MPI_INT64_T, 0, TagPong, m_comms->clock, MPI_STATUS_IGNORE);
        trips.take(t1, t2, clock.now());
    }
    if (at)
        *at = clock.now();
    if (mid)
        *mid = trips.mid;
    return trips.best;
}

// A rank other than 0, from its poll while the run goes: kPings round trips with rank 0's
// poll (serveClock), the tightest one kept, as at the start. The first ping waits for rank 0's
// next poll; the others find it answering. A burst rank 0 does not answer in time is dropped.
void MpiCommunicator::syncClock()
{
    BestRoundTrip trips;
    for (int k = 0; k < kPings; ++k) {
        const std::int64_t t1 = m_clock->now();
        MPI_Request send;
        MPI_Isend(&t1, 1, MPI_INT64_T, 0, TagSyncPing, m_comms->clock, &send);
        std::int64_t reply[2] = {};
        const auto deadline = Clock::now() + std::chrono::milliseconds(kSyncWaitMs);
        bool answered = false;
        while (!answered) {
            MPI_Request recv;
            MPI_Irecv(reply, 2, MPI_INT64_T, 0, TagSyncPong, m_comms->clock, &recv);
            int done = 0, spins = 0;
            while (!done && Clock::now() < deadline && !m_cancelled.load(std::memory_order_relaxed)) {
                MPI_Test(&recv, &done, MPI_STATUS_IGNORE);
                if (!done)
                    backoff(spins);
            }
            if (!done) {
                MPI_Cancel(&recv);
                MPI_Wait(&recv, MPI_STATUS_IGNORE);
                break;
            }
            answered = reply[0] == t1; // else the answer to a ping of a burst given up on
        }
        const std::int64_t t3 = m_clock->now();
        int sent = 0;
        MPI_Test(&send, &sent, MPI_STATUS_IGNORE);
        if (!sent) {
            MPI_Cancel(&send);
            MPI_Wait(&send, MPI_STATUS_IGNORE);
        }
        if (!answered)
            break;
        trips.take(t1, reply[1], t3);
    }
    if (!trips.any())
        return;
    std::lock_guard lock(m_modelMutex);
    m_model.add(trips.mid, trips.best);
}

// Rank 0, from its poll: answers the bursts of syncClock, one rank's at a time, at once.
void MpiCommunicator::serveClock()
{
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, TagSyncPing, m_comms->clock, &flag, &st);
    while (flag) {
        const int from = st.MPI_SOURCE;
        int answered = 0;
        auto last = Clock::now();
        while (answered < kPings && Clock::now() - last < std::chrono::milliseconds(5)) {
            MPI_Iprobe(from, TagSyncPing, m_comms->clock, &flag, &st);
            if (!flag) {
                std::this_thread::yield();
                continue;
            }
            std::int64_t reply[2] = {};
            MPI_Recv(&reply[0], 1, MPI_INT64_T, from, TagSyncPing, m_comms->clock, MPI_STATUS_IGNORE);
            reply[1] = m_clock->now();
            // 16 bytes go eagerly: the send returns without waiting for the other rank.
            MPI_Send(reply, 2, MPI_INT64_T, from, TagSyncPong, m_comms->clock);
            ++answered;
            last = Clock::now();
        }
        MPI_Iprobe(MPI_ANY_SOURCE, TagSyncPing, m_comms->clock, &flag, &st);
    }
}

std::int64_t MpiCommunicator::toRootClock(std::int64_t ns) const
{
    std::lock_guard lock(m_modelMutex);
    return ns + (m_model.empty() ? m_offset.offsetNs : m_model.offsetAt(ns));
}

std::vector<ClockFit> MpiCommunicator::clockFits() const { return m_fits; }

void MpiCommunicator::startClock(RunClock &clock)
{
    std::int64_t origin = clock.originSteadyNs();
    MPI_Bcast(&origin, 1, MPI_INT64_T, 0, m_comms->clock);
    if (m_rank != 0)
        clock.restartAt(origin);
    std::int64_t mid = 0;
    m_offset = measureOffset(clock, nullptr, &mid);
    {
        std::lock_guard lock(m_modelMutex);
        m_model = ClockModel();
        if (m_rank != 0)
            m_model.add(mid, m_offset);
    }
    m_clock = &clock;
    m_finishing = false;
    m_lastSync = Clock::now();
    m_lastHeard.assign(std::size_t(m_ranks), Clock::now());
    m_lastBeat = Clock::now();
}

std::vector<ClockOffset> MpiCommunicator::clockOffsets(bool atEnd) const
{
    return atEnd ? m_endOffsets : m_startOffsets;
}

// ---- records, control ----------------------------------------------------------------------

void MpiCommunicator::reapSends()
{
    for (auto it = m_sends.begin(); it != m_sends.end();) {
        int done = 0;
        MPI_Test(&(*it)->request, &done, MPI_STATUS_IGNORE);
        it = done ? m_sends.erase(it) : std::next(it);
    }
}

void MpiCommunicator::sendRecords(std::vector<Record> &batch)
{
    if (batch.empty() || m_rank == 0)
        return;
    auto s = std::make_unique<PendingSend>();
    s->records.swap(batch);
    MPI_Isend(s->records.data(), int(s->records.size() * sizeof(Record)), MPI_BYTE, 0, TagRecords,
              m_comms->records, &s->request);
    m_sends.push_back(std::move(s));
}

void MpiCommunicator::receiveAll(std::vector<Record> &into)
{
    MPI_Status st;
    int bytes = 0;
    while (probe(m_comms->records, st, bytes)) {
        if (st.MPI_TAG == TagRecords) {
            const std::size_t at = into.size();
            into.resize(at + std::size_t(bytes) / sizeof(Record));
            MPI_Recv(into.data() + at, bytes, MPI_BYTE, st.MPI_SOURCE, TagRecords,
                     m_comms->records, MPI_STATUS_IGNORE);
        } else {
            int abandoned = 0;
            MPI_Recv(&abandoned, 1, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, m_comms->records,
                     MPI_STATUS_IGNORE);
            if (st.MPI_TAG == TagDone) {
                m_doneRanks[std::size_t(st.MPI_SOURCE)] = true;
                m_comms->anyAbandoned = m_comms->anyAbandoned || abandoned;
            }
        }
        m_lastHeard[std::size_t(st.MPI_SOURCE)] = Clock::now();
    }
}

bool MpiCommunicator::receiveRecords(std::vector<Record> &out)
{
    if (m_rank != 0)
        return true;
    // What arrived while nobody asked (heartbeat polls, the end), then what is waiting now.
    out.insert(out.end(), m_inbox.begin(), m_inbox.end());
    m_inbox.clear();
    receiveAll(out);
    return true;
}

void MpiCommunicator::drainControl()
{
    MPI_Status st;
    int bytes = 0;
    while (probe(m_comms->control, st, bytes)) {
        std::string text(std::size_t(std::max(bytes, 0)), '\0');
        MPI_Recv(text.data(), bytes, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, m_comms->control,
                 MPI_STATUS_IGNORE);
        m_lastHeard[std::size_t(st.MPI_SOURCE)] = Clock::now();
        if (st.MPI_TAG == TagStop) {
            m_stopped = true;
            if (!text.empty())
                setError(text);
        } else if (st.MPI_TAG == TagKnob && text.size() == sizeof(Knob)) {
            Knob k;
            std::memcpy(&k, text.data(), sizeof k);
            m_knobsIn.push_back(k);
        }
    }
}

bool MpiCommunicator::checkAlive()
{
    const auto now = Clock::now();
    for (int r = 0; r < m_ranks; ++r) {
        // Rank 0 hears from everyone, the others from rank 0.
        if (r == m_rank || (m_rank != 0 && r != 0) || m_doneRanks[std::size_t(r)])
            continue;
        const auto silent = now - m_lastHeard[std::size_t(r)];
        if (silent > std::chrono::nanoseconds(m_timeoutNs)) {
            char seconds[32];
            std::snprintf(seconds, sizeof seconds, "%.1f",
                          std::chrono::duration<double>(silent).count());
            setError(rankName(r) + " has not been heard from for " + seconds +
                     " s (killed, hung or cut off: mpi.timeout_s)");
            m_lost = true;
            return false;
        }
    }
    return true;
}

bool MpiCommunicator::poll()
{
    reapSends();
    const auto now = Clock::now();
    if (now - m_lastBeat > std::chrono::milliseconds(500)) {
        m_lastBeat = now;
        for (int r = 0; r < m_ranks; ++r)
            if (r != m_rank && (m_rank == 0 || r == 0)) {
                auto s = std::make_unique<PendingSend>();
                MPI_Isend(nullptr, 0, MPI_CHAR, r, TagBeat, m_comms->control, &s->request);
                m_sends.push_back(std::move(s));
            }
    }
    {
        std::vector<std::pair<int, Knob>> knobs;
        {
            std::lock_guard lock(m_knobMutex);
            knobs.swap(m_knobsOut);
        }
        for (const auto &[to, k] : knobs) {
            if (to < 0 || to >= m_ranks)
                continue;
            if (to == m_rank) {
                m_knobsIn.push_back(k);
                continue;
            }
            auto s = std::make_unique<PendingSend>();
            s->text.assign(reinterpret_cast<const char *>(&k), sizeof k);
            MPI_Isend(s->text.data(), int(s->text.size()), MPI_BYTE, to, TagKnob, m_comms->control, &s->request);
            m_sends.push_back(std::move(s));
        }
    }
    drainControl();
    if (m_clock && m_ranks > 1) {
        if (m_rank == 0) {
            serveClock();
        } else if (!m_finishing && now - m_lastSync > std::chrono::milliseconds(kClockSyncMs)) {
            syncClock();
            m_lastSync = Clock::now();
        }
    }
    if (m_rank == 0)
        receiveAll(m_inbox); // records and "done" count as signs of life too
    return checkAlive() && !m_stopped;
}

void MpiCommunicator::sendKnob(int rank, const Knob &knob)
{
    static_assert(std::is_trivially_copyable_v<Knob>, "knobs travel as bytes");
    std::lock_guard lock(m_knobMutex);
    m_knobsOut.emplace_back(rank, knob);
}

void MpiCommunicator::takeKnobs(std::vector<Knob> &out)
{
    out.insert(out.end(), m_knobsIn.begin(), m_knobsIn.end());
    m_knobsIn.clear();
}

void MpiCommunicator::announceStop(const std::string &error)
{
    m_stopped = true;
    for (int r = 0; r < m_ranks; ++r) {
        if (r == m_rank)
            continue;
        auto s = std::make_unique<PendingSend>();
        s->text = error;
        MPI_Isend(s->text.data(), int(s->text.size()), MPI_BYTE, r, TagStop, m_comms->control,
                  &s->request);
        m_sends.push_back(std::move(s));
    }
}

// ---- evaluation ------------------------------------------------------------------------------

bool MpiCommunicator::gatherEval(const std::vector<EvalResult> &local, std::vector<EvalResult> &all)
{
    static_assert(std::is_trivially_copyable_v<EvalResult>, "shards travel as bytes");
    const int mine = int(local.size() * sizeof(EvalResult));
    std::vector<int> counts(static_cast<std::size_t>(m_ranks)), displs(counts.size());
    MPI_Request req;
    MPI_Igather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, m_comms->eval, &req);
    if (!await(&req))
        return false;
    int total = 0;
    for (int r = 0; r < m_ranks; ++r) {
        displs[std::size_t(r)] = total;
        total += counts[std::size_t(r)];
    }
    if (m_rank == 0)
        all.resize(std::size_t(total) / sizeof(EvalResult));
    MPI_Igatherv(local.data(), mine, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE,
                 0, m_comms->eval, &req);
    return await(&req);
}

// ---- the end of a run -----------------------------------------------------------------------

void MpiCommunicator::hurry()
{
    std::int64_t none = 0;
    m_hurriedNs.compare_exchange_strong(none, steadyNs());
}

bool MpiCommunicator::finishRun(const RunClock &clock)
{
    std::int64_t at = 0;
    if (m_rank != 0) {
        // After this rank's last records: "done", then the clock again, then both offsets.
        m_finishing = true;
        int abandoned = m_abandoned.load() ? 1 : 0;
        MPI_Send(&abandoned, 1, MPI_INT, 0, TagDone, m_comms->records);
        std::int64_t mid = 0;
        m_endOffset = measureOffset(clock, &at, &mid);
        ClockFit fit; // how far the model the spans were sent with was from the end's clock
        {
            std::lock_guard lock(m_modelMutex);
            fit.driftPpm = m_model.driftPpm();
            fit.measurements = m_model.measurements() + 1;
            fit.residualNs = std::llabs(m_model.offsetAt(mid) - m_endOffset.offsetNs);
        }
        const std::int64_t offsets[kOffsetValues] = {
            m_offset.offsetNs, m_offset.uncertaintyNs, m_endOffset.offsetNs,
            m_endOffset.uncertaintyNs, std::llround(fit.driftPpm * 1000.0), fit.residualNs,
            fit.measurements};
        MPI_Send(offsets, kOffsetValues, MPI_INT64_T, 0, TagOffsets, m_comms->clock);
        int fin = 0;
        MPI_Request req;
        MPI_Irecv(&fin, 1, MPI_INT, 0, TagFin, m_comms->clock, &req);
        // Rank 0 may take a while (other ranks' records); keep answering its heartbeats.
        int done = 0, spins = 0;
        while (!done) {
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (!done && !poll() && m_lost) {
                MPI_Cancel(&req);
                MPI_Wait(&req, MPI_STATUS_IGNORE);
                m_abandoned = true;
                m_clock = nullptr;
                return false;
            }
            if (!done)
                backoff(spins);
        }
        m_comms->anyAbandoned = fin != 0;
        m_clock = nullptr;
        return true;
    }
    // Rank 0: every rank's records up to its "done", then its clock, in rank order.
    bool ok = true;
    for (int r = 1; r < m_ranks && ok; ++r) {
        int spins = 0;
        while (!m_doneRanks[std::size_t(r)]) {
            if (!poll() && m_lost) {
                ok = false;
                break;
            }
            // mpirun is ending the job (it does when a rank dies): the ranks alive answer at
            // once, so one that has not after a moment is the one lost.
            const std::int64_t since = m_hurriedNs.load();
            if (since > 0 && steadyNs() - since > 300'000'000) {
                setError(rankName(r) + " did not answer when mpirun ended the job (a rank that "
                                       "dies makes mpirun end every rank)");
                m_lost = true;
                ok = false;
                break;
            }
            backoff(spins);
        }
    }
    if (ok) {
        measureOffset(clock, &at);
        for (int r = 1; r < m_ranks; ++r) {
            std::int64_t offsets[kOffsetValues] = {};
            MPI_Recv(offsets, kOffsetValues, MPI_INT64_T, r, TagOffsets, m_comms->clock, MPI_STATUS_IGNORE);
            m_startOffsets[std::size_t(r)] = {offsets[0], offsets[1]};
            m_endOffsets[std::size_t(r)] = {offsets[2], offsets[3]};
            m_fits[std::size_t(r)] = {double(offsets[4]) / 1000.0, offsets[5], int(offsets[6])};
        }
    } else {
        m_comms->anyAbandoned = true;
    }
    m_comms->anyAbandoned = m_comms->anyAbandoned || m_abandoned.load();
    const int fin = m_comms->anyAbandoned ? 1 : 0;
    for (int r = 1; r < m_ranks && ok; ++r)
        MPI_Send(&fin, 1, MPI_INT, r, TagFin, m_comms->clock);
    m_clock = nullptr; // the run's clock ends with the run
    return ok;
}

// ---- the sync group --------------------------------------------------------------------------

namespace {

// Each rank's first worker exchanges for the rank; the rank's other workers wait for it at a
// local barrier. ordered: slice o of the mean belongs to rank o, which receives slice o of
// every worker's gradient (MPI_Alltoallv, arriving in worker order), sums them in that order
// exactly as the threads' shared-memory exchange does, and everyone gathers the slices
// (MPI_Allgatherv): bit for bit the threads' result. mpi: MPI_Allreduce of the ranks' sums.
class MpiSyncGroup final : public SyncGroup {
public:
    MpiSyncGroup(MpiCommunicator &comm, MPI_Comm c, const std::vector<Device *> &devices,
                 const std::vector<float *> &grads, std::size_t count, int workers,
                 bool allreduce, const Communicator &layout, const RunClock &clock)
        : m_comm(comm), m_c(c), m_devices(devices), m_grads(grads), m_count(count),
          m_workers(workers), m_allreduce(allreduce), m_barrier(comm, c, int(devices.size()), &clock)
    {
        const int ranks = layout.ranks(), rank = layout.rank();
        const auto local = devices.size();
        for (std::size_t l = 0; l < local; ++l) {
            if (devices[l]->hostAccessible()) {
                m_host.push_back(grads[l]);
                m_out.emplace_back();
            } else {
                m_staged.emplace_back(count);
                m_host.push_back(m_staged.back().data());
                m_out.emplace_back(*devices[l], count);
            }
        }
        m_mean.resize(count);
        if (m_allreduce)
            return;
        auto lo = [&](int o) { return int(count * std::size_t(o) / std::size_t(ranks)); };
        m_myLo = lo(rank);
        m_myN = lo(rank + 1) - m_myLo;
        int sent = 0, received = 0;
        for (int o = 0; o < ranks; ++o) {
            const int n = lo(o + 1) - lo(o);
            m_sendCounts.push_back(int(local) * n);
            m_sendDispls.push_back(sent);
            sent += int(local) * n;
            const int theirs = layout.firstWorker(workers, o + 1) - layout.firstWorker(workers, o);
            m_recvCounts.push_back(theirs * m_myN);
            m_recvDispls.push_back(received);
            received += theirs * m_myN;
            m_sliceCounts.push_back(n);
            m_sliceDispls.push_back(lo(o));
        }
        m_send.resize(std::size_t(sent));
        m_recv.resize(std::size_t(received));
    }

    std::string algorithm() const override
    {
        return m_allreduce ? "MPI_Allreduce" : "ordered (MPI_Alltoallv + MPI_Allgatherv)";
    }

    std::size_t prepare(int local) override
    {
        const auto l = std::size_t(local);
        if (m_devices[l]->hostAccessible())
            return 0;
        m_devices[l]->download(m_host[l], m_grads[l], m_count);
        return m_count * sizeof(float);
    }

    bool arrive(int local, std::int64_t arrivedNs, std::int64_t *releasedNs) override
    {
        return m_barrier.arrive(local, arrivedNs, releasedNs);
    }

    std::size_t reduce(int local) override
    {
        std::size_t moved = 0;
        if (local == 0 && m_barrier.ok)
            moved = exchange();
        m_barrier.local.arriveAndWait();
        return moved;
    }

    const float *finish(int local) override
    {
        const auto l = std::size_t(local);
        if (m_devices[l]->hostAccessible())
            return m_mean.data();
        m_devices[l]->upload(m_out[l].data(), m_mean.data(), m_count);
        return m_out[l].data();
    }

    void cancel() override { m_barrier.cancel(); }

private:

    std::size_t exchange()
    {
        const std::size_t local = m_host.size();
        MPI_Request req;
        if (m_allreduce) {
            std::copy(m_host[0], m_host[0] + m_count, m_mean.begin());
            for (std::size_t l = 1; l < local; ++l)
                for (std::size_t i = 0; i < m_count; ++i)
                    m_mean[i] += m_host[l][i];
            MPI_Iallreduce(MPI_IN_PLACE, m_mean.data(), int(m_count), MPI_FLOAT, MPI_SUM, m_c, &req);
            if (!(m_barrier.ok = m_comm.await(&req)))
                return 0;
            if (m_workers > 1) {
                const float inv = 1.0f / float(m_workers);
                for (float &v : m_mean)
                    v *= inv;
            }
            return 2 * m_count * sizeof(float);
        }
        // Slice o of each of this rank's workers, in worker order, for rank o.
        float *out = m_send.data();
        for (std::size_t o = 0; o < m_sliceCounts.size(); ++o)
            for (std::size_t l = 0; l < local; ++l) {
                const float *from = m_host[l] + m_sliceDispls[o];
                out = std::copy(from, from + m_sliceCounts[o], out);
            }
        MPI_Ialltoallv(m_send.data(), m_sendCounts.data(), m_sendDispls.data(), MPI_FLOAT,
                       m_recv.data(), m_recvCounts.data(), m_recvDispls.data(), MPI_FLOAT, m_c,
                       &req);
        if (!(m_barrier.ok = m_comm.await(&req)))
            return 0;
        // The same arithmetic as the shared-memory exchange: copy, add in worker order, scale.
        float *dst = m_mean.data() + m_myLo;
        const std::size_t n = std::size_t(m_myN);
        std::copy(m_recv.data(), m_recv.data() + n, dst);
        for (int k = 1; k < m_workers; ++k) {
            const float *g = m_recv.data() + std::size_t(k) * n;
            for (std::size_t i = 0; i < n; ++i)
                dst[i] += g[i];
        }
        if (m_workers > 1) {
            const float inv = 1.0f / float(m_workers);
            for (std::size_t i = 0; i < n; ++i)
                dst[i] *= inv;
        }
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, m_mean.data(), m_sliceCounts.data(),
                        m_sliceDispls.data(), MPI_FLOAT, m_c, &req);
        if (!(m_barrier.ok = m_comm.await(&req)))
            return 0;
        return (m_send.size() + m_recv.size() + 2 * m_count) * sizeof(float);
    }

    MpiCommunicator &m_comm;
    MPI_Comm m_c;
    std::vector<Device *> m_devices;
    std::vector<float *> m_grads;
    std::size_t m_count;
    int m_workers;
    bool m_allreduce;
    MpiRunBarrier m_barrier;
    std::vector<float *> m_host; // each local worker's gradients in host memory
    std::vector<std::vector<float>> m_staged;
    std::vector<DeviceBuffer> m_out;
    std::vector<float> m_mean;
    int m_myLo = 0, m_myN = 0;
    std::vector<int> m_sendCounts, m_sendDispls, m_recvCounts, m_recvDispls;
    std::vector<int> m_sliceCounts, m_sliceDispls;
    std::vector<float> m_send, m_recv;
};

} // namespace

// sync.allreduce = auto or nccl: whether NCCL can serve the run is a question to every rank
// (collectives), which may only be asked once every rank has built its replicas: a rank that
// failed before (a data file missing on its host) never comes to ask it. So the group is chosen
// in agreeReady, after every rank said it is ready; until then this one holds the question.
class MpiCommunicator::ChosenSyncGroup final : public SyncGroup {
public:
    ChosenSyncGroup(MpiCommunicator &comm, const std::vector<Device *> &devices,
                    const std::vector<float *> &grads, std::size_t count, int workers,
                    const RunClock &clock)
        : m_comm(comm), m_devices(devices), m_grads(grads), m_count(count), m_workers(workers),
          m_clock(clock)
    {
    }
    ~ChosenSyncGroup() override
    {
        if (m_comm.m_choosing == this)
            m_comm.m_choosing = nullptr;
    }

    // Collective over the ranks; throws ConfigError of sync.allreduce when nccl was asked for
    // and cannot be had (alike on every rank).
    void choose()
    {
        std::string id;
        const std::string why = mpiNcclVerdict(m_comm, m_comm.m_comms->grads, m_devices, m_workers, &id);
        if (why.empty()) {
            m_chosen = makeMpiNcclSyncGroup(m_comm, m_comm.m_comms->grads, m_devices, m_grads,
                                            m_count, m_workers, m_clock, std::move(id));
            return;
        }
        if (m_comm.m_allreduce == "nccl")
            throw ConfigError("sync.allreduce = nccl cannot be had: " + why, {"sync.allreduce"});
        m_chosen = m_comm.orderedGroup(m_devices, m_grads, m_count, m_workers, m_clock, false);
    }

    std::string algorithm() const override { return m_chosen ? m_chosen->algorithm() : "not chosen yet"; }
    std::size_t prepare(int local) override { return m_chosen->prepare(local); }
    bool arrive(int local, std::int64_t arrivedNs, std::int64_t *releasedNs) override
    {
        return m_chosen->arrive(local, arrivedNs, releasedNs);
    }
    std::size_t reduce(int local) override { return m_chosen->reduce(local); }
    const float *finish(int local) override { return m_chosen->finish(local); }
    void cancel() override
    {
        if (m_chosen)
            m_chosen->cancel();
        else
            m_comm.cancel();
    }

private:
    MpiCommunicator &m_comm;
    std::vector<Device *> m_devices;
    std::vector<float *> m_grads;
    std::size_t m_count;
    int m_workers;
    const RunClock &m_clock;
    std::unique_ptr<SyncGroup> m_chosen;
};

void MpiCommunicator::chooseSyncGroup()
{
    if (ChosenSyncGroup *g = std::exchange(m_choosing, nullptr))
        g->choose();
}

std::unique_ptr<SyncGroup> MpiCommunicator::orderedGroup(const std::vector<Device *> &devices,
                                                         const std::vector<float *> &grads,
                                                         std::size_t count, int workers,
                                                         const RunClock &clock, bool allreduce)
{
    if (count > std::size_t(std::numeric_limits<int>::max()))
        throw CommError("the model's " + std::to_string(count) +
                        " parameters exceed what one MPI message counts (2^31 - 1)");
    return std::make_unique<MpiSyncGroup>(*this, m_comms->grads, devices, grads, count, workers,
                                          allreduce, *this, clock);
}

std::unique_ptr<SyncGroup> MpiCommunicator::syncGroup(const std::vector<Device *> &devices,
                                                      const std::vector<float *> &grads,
                                                      std::size_t count, int workers,
                                                      const RunClock &clock)
{
    if (m_allreduce == "ordered" || m_allreduce == "mpi")
        return orderedGroup(devices, grads, count, workers, clock, m_allreduce == "mpi");
    auto g = std::make_unique<ChosenSyncGroup>(*this, devices, grads, count, workers, clock);
    m_choosing = g.get();
    return g;
}

std::unique_ptr<AsyncLink> MpiCommunicator::asyncLink(std::size_t count, std::size_t stats, int workers)
{
    return makeMpiAsyncLink(*this, &m_comms->async, count, stats, workers);
}

} // namespace syncopate
