#include "mpiasync.h"

#include "mpicomm.h"

#include <mpi.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <pthread.h>
#include <thread>
#include <vector>

namespace syncopate {
namespace {

// A request says what it is; a reply says whether the run goes on.
enum Kind : std::int32_t { KindPull = 1, KindPush, ReplyOk, ReplyDone };

// The head of every message. Request: kind, flags (a push: 1 with batch-norm statistics),
// step. Reply: kind, flags (a pull: 1 when held by the bound), version, then staleness (a
// push) or the time held (a pull), and a push's batch-norm divergence.
struct Header {
    std::int32_t kind = 0;
    std::int32_t flags = 0;
    std::int64_t step = 0;
    std::int64_t version = 0;
    std::int64_t value = 0;
    double divergence = 0;
};
static_assert(sizeof(Header) % sizeof(float) == 0, "the body follows the header, float-aligned");
constexpr std::size_t kHeaderFloats = sizeof(Header) / sizeof(float);

// A header and a body of floats, in one buffer sized once.
class Message {
public:
    explicit Message(std::size_t floats) : m_data(kHeaderFloats + floats) {}
    Header header() const
    {
        Header h;
        std::memcpy(static_cast<void *>(&h), m_data.data(), sizeof h);
        return h;
    }
    void setHeader(const Header &h) { std::memcpy(m_data.data(), &h, sizeof h); }
    float *body() { return m_data.data() + kHeaderFloats; }
    const float *body() const { return m_data.data() + kHeaderFloats; }
    void *data() { return m_data.data(); }
    // Bytes of a message whose body holds floats.
    static int bytes(std::size_t floats) { return int((kHeaderFloats + floats) * sizeof(float)); }
    int capacity() const { return int(m_data.size() * sizeof(float)); }

private:
    std::vector<float> m_data;
};

std::int64_t steadyNs()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}


class MpiAsyncLink final : public AsyncLink {
public:
    MpiAsyncLink(MpiCommunicator &comm, MPI_Comm c, std::size_t count, std::size_t stats, int workers)
        : m_comm(comm), m_c(c), m_count(count), m_stats(stats)
    {
        const std::size_t most = kHeaderFloats + count + 2 * stats;
        if (most > std::size_t(std::numeric_limits<int>::max()) / sizeof(float))
            throw CommError("the model's " + std::to_string(count) +
                            " parameters exceed what one MPI message of async mode carries (2 GiB)");
        if (comm.rank() != 0) {
            m_first = comm.firstWorker(workers);
            for (int l = 0; l < comm.localWorkers(workers); ++l) {
                m_out.emplace_back(count + 2 * stats);
                m_in.emplace_back(count);
            }
            return;
        }
        for (int w = comm.firstWorker(workers, 1); w < workers; ++w)
            m_slots.push_back(std::make_unique<Slot>(w, comm.rankOfWorker(workers, w), count, stats));
    }

    Result pull(int local, std::int64_t step, float *params, ParameterServer::Pulled &out) override
    {
        Message &req = m_out[std::size_t(local)];
        Header h;
        h.kind = KindPull;
        h.step = step;
        req.setHeader(h);
        const Result r = exchange(local, Message::bytes(0));
        if (r == Result::Cancelled)
            return r; // the reply's buffer may still be MPI's
        const Header a = m_in[std::size_t(local)].header();
        out.version = a.version;
        if (r != Result::Ok)
            return r;
        out.heldByBound = a.flags != 0;
        out.heldNs = a.value;
        std::memcpy(params, m_in[std::size_t(local)].body(), m_count * sizeof(float));
        return r;
    }

    Result push(int local, std::int64_t step, const float *grads, const float *bnBatch,
                const float *bnOwn, ParameterServer::Pushed &out) override
    {
        Message &req = m_out[std::size_t(local)];
        Header h;
        h.kind = KindPush;
        h.step = step;
        h.flags = bnBatch ? 1 : 0;
        req.setHeader(h);
        float *body = req.body();
        std::memcpy(body, grads, m_count * sizeof(float));
        std::size_t floats = m_count;
        if (bnBatch) {
            std::memcpy(body + floats, bnBatch, m_stats * sizeof(float));
            std::memcpy(body + floats + m_stats, bnOwn, m_stats * sizeof(float));
            floats += 2 * m_stats;
        }
        const Result r = exchange(local, Message::bytes(floats));
        if (r == Result::Cancelled)
            return r;
        const Header a = m_in[std::size_t(local)].header();
        out.version = a.version;
        out.staleness = a.value;
        out.bnDivergence = a.divergence;
        return r;
    }

    void serve(ParameterServer &server) override;

private:
    // The reply's receive goes first, so that it is posted before rank 0 can answer.
    Result exchange(int local, int bytes)
    {
        const int tag = m_first + local;
        MPI_Request send, recv;
        Message &in = m_in[std::size_t(local)];
        MPI_Irecv(in.data(), in.capacity(), MPI_BYTE, 0, tag, m_c, &recv);
        MPI_Isend(m_out[std::size_t(local)].data(), bytes, MPI_BYTE, 0, tag, m_c, &send);
        if (!m_comm.await(&send) || !m_comm.await(&recv))
            return Result::Cancelled;
        return in.header().kind == ReplyDone ? Result::Done : Result::Ok;
    }

    // Rank 0: one remote worker's request and reply.
    struct Slot {
        Slot(int w, int r, std::size_t count, std::size_t stats)
            : worker(w), rank(r), request(count + 2 * stats), reply(count)
        {
        }
        int worker, rank;
        Message request, reply;
        MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
        bool pending = false;  // a request in, not answered yet
        bool finished = false; // told the run is done: no more requests
        std::int64_t arrivedNs = 0;
    };
    void post(Slot &s)
    {
        MPI_Irecv(s.request.data(), s.request.capacity(), MPI_BYTE, s.rank, s.worker, m_c, &s.recv);
    }
    // Whether the server answered s's request (then the reply is on its way).
    bool answer(ParameterServer &server, Slot &s);

    MpiCommunicator &m_comm;
    MPI_Comm m_c;
    std::size_t m_count, m_stats;
    // A worker's rank: its request and the reply, per local worker.
    int m_first = 0;
    std::vector<Message> m_out, m_in;
    // Rank 0: every remote worker.
    std::vector<std::unique_ptr<Slot>> m_slots;
};

bool MpiAsyncLink::answer(ParameterServer &server, Slot &s)
{
    // The previous reply's send has left the buffer (the worker has it, since it asked again).
    if (s.send != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Test(&s.send, &done, MPI_STATUS_IGNORE);
        if (!done)
            return false;
    }
    const Header h = s.request.header();
    Header r;
    std::size_t floats = 0;
    ParameterServer::Answer a;
    if (h.kind == KindPull) {
        ParameterServer::Pulled p;
        a = server.tryPull(s.worker, h.step, s.reply.body(), p);
        r.version = p.version;
        r.flags = p.heldByBound ? 1 : 0;
        r.value = p.heldByBound ? steadyNs() - s.arrivedNs : 0;
        floats = m_count;
    } else {
        const float *grads = s.request.body();
        const bool bn = h.flags != 0;
        ParameterServer::Pushed p;
        a = server.tryPush(s.worker, h.step, grads, bn ? grads + m_count : nullptr,
                           bn ? grads + m_count + m_stats : nullptr, p);
        r.version = p.version;
        r.value = p.staleness;
        r.divergence = p.bnDivergence;
    }
    if (a == ParameterServer::Answer::Later)
        return false;
    s.pending = false;
    if (a == ParameterServer::Answer::Done) {
        r.kind = ReplyDone;
        floats = 0;
        s.finished = true;
    } else {
        r.kind = ReplyOk;
        post(s); // before the reply: the worker's next request may follow it at once
    }
    s.reply.setHeader(r);
    MPI_Isend(s.reply.data(), Message::bytes(floats), MPI_BYTE, s.rank, s.worker, m_c, &s.send);
    return true;
}

void MpiAsyncLink::serve(ParameterServer &server)
{
    pthread_setname_np(pthread_self(), "syncopate-ps");
    for (auto &s : m_slots)
        post(*s);
    std::uint64_t seen = server.generation();
    int spins = 0;
    for (;;) {
        if (server.stopping() || m_comm.cancelled())
            break;
        bool arrived = false, open = false;
        for (auto &s : m_slots) {
            if (s->recv != MPI_REQUEST_NULL) {
                int done = 0;
                MPI_Test(&s->recv, &done, MPI_STATUS_IGNORE);
                if (done) {
                    s->pending = true;
                    s->arrivedNs = steadyNs();
                    arrived = true;
                }
            }
            if (s->send != MPI_REQUEST_NULL) {
                int done = 0;
                MPI_Test(&s->send, &done, MPI_STATUS_IGNORE);
            }
            open = open || !s->finished || s->send != MPI_REQUEST_NULL;
        }
        if (!open)
            return; // every remote worker told, every reply delivered
        // Held requests are asked again only when something changed: an answer may let others
        // go (the scripted order, the bound), so go round until none does.
        // The generation is read before each pass, so a change during one is not missed.
        bool answered = false;
        if (arrived || server.generation() != seen) {
            for (bool again = true; again;) {
                again = false;
                seen = server.generation();
                for (auto &s : m_slots)
                    if (s->pending && answer(server, *s))
                        again = answered = true;
            }
        }
        // A reply still leaving keeps the loop short: its slot is tried again once it has.
        bool leaving = false;
        for (auto &s : m_slots)
            leaving = leaving || (s->pending && s->send != MPI_REQUEST_NULL);
        if (arrived || answered || leaving)
            spins = 0;
        else
            MpiCommunicator::backoff(spins);
        if (leaving)
            std::this_thread::yield();
    }
    // Stopped: receives nobody will send to are cancelled; what cannot finish is left to the
    // end of the job (MpiCommunicator::end aborts it once rank 0 has written the run).
    for (auto &s : m_slots) {
        if (s->recv != MPI_REQUEST_NULL) {
            MPI_Cancel(&s->recv);
            m_comm.await(&s->recv);
        }
        if (s->send != MPI_REQUEST_NULL)
            m_comm.await(&s->send);
    }
}

} // namespace

std::unique_ptr<AsyncLink> makeMpiAsyncLink(MpiCommunicator &comm, const void *mpiComm,
                                            std::size_t count, std::size_t stats, int workers)
{
    return std::make_unique<MpiAsyncLink>(comm, *static_cast<const MPI_Comm *>(mpiComm), count,
                                          stats, workers);
}

} // namespace syncopate
