// The all-reduce under the engine, alone: MPI_Allreduce (sum, in place) of a buffer of the
// model's gradient size and larger, against memcpy of the same bytes on one core (the cost of
// the thread version's shared-memory exchange, which reads and writes each byte about once).
// Run under mpirun; rank 0 prints one line per size:
//   ranks=N bytes=B allreduce_ms=T algbw_gb_s=X busbw_gb_s=Y memcpy_gb_s=Z
// busbw = algbw * 2(N-1)/N, as nccl-tests report it.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double seconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double memcpyGbS(std::size_t bytes)
{
    std::vector<char> a(bytes, 1), b(bytes, 2);
    double best = 1e30;
    for (int rep = 0; rep < 20; ++rep) {
        const double t0 = seconds();
        std::memcpy(b.data(), a.data(), bytes);
        const double t = seconds() - t0;
        best = std::min(best, t);
        a[std::size_t(rep) % bytes] = b[bytes / 2]; // keep the copies observable
    }
    return double(bytes) / best / 1e9;
}

} // namespace

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    // 1204264 bytes: the default preset's gradient (784-256-256-10 would be more; the engine's
    // bench model is this one).
    std::vector<std::size_t> sizes = {1204264, std::size_t(16) << 20};
    if (argc > 1)
        sizes = {std::size_t(std::strtoull(argv[1], nullptr, 10))};
    for (const std::size_t bytes : sizes) {
        std::vector<float> buf(bytes / sizeof(float), 1.0f);
        const int reps = bytes > (std::size_t(4) << 20) ? 10 : 40;
        MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); // warm-up
        std::vector<double> times;
        for (int rep = 0; rep < reps; ++rep) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = seconds();
            MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double t = seconds() - t0, slowest = 0;
            MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            times.push_back(slowest);
        }
        std::sort(times.begin(), times.end());
        const double median = times[times.size() / 2];
        const double algbw = double(bytes) / median / 1e9;
        const double copy = rank == 0 ? memcpyGbS(bytes) : 0;
        if (rank == 0)
            std::printf("ranks=%d bytes=%zu allreduce_ms=%.3f algbw_gb_s=%.3f busbw_gb_s=%.3f memcpy_gb_s=%.2f\n", ranks,
                        bytes, median * 1e3, algbw, ranks > 1 ? algbw * 2.0 * (ranks - 1) / ranks : 0.0, copy);
    }
    MPI_Finalize();
    return 0;
}
