// 2 MiB pages for the buffers a training step walks. On a VM every TLB miss is a two-level page
// walk (the guest's tables, then the host's), and with 4 KiB pages a step's parameters,
// gradients and optimizer state (a few MiB) and a batch gathered from random rows of a dataset
// (tens of MiB) miss often. Measured on a 2-core KVM Xeon (THP "madvise", the Debian default):
// a 64-row batch from a 51 MiB dataset took 55 us to gather on 4 KiB pages and 35-38 us on 2 MiB
// ones; one worker ran 8% and two sync workers 10% more samples/s (medians of 6 interleaved
// rounds), and a run's speed no longer depended on which physical pages it was given. The
// kernel gives huge pages where it can (transparent huge pages, madvise); where it cannot or is
// set to "never", nothing changes.
#pragma once

#include <cstddef>
#include <vector>

namespace syncopate {

constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;

// Asks for huge pages over the 2 MiB-aligned part of [p, p + bytes). Only pages not yet touched
// are affected: call it before the buffer is written. Harmless where unsupported.
void adviseHugePages(void *p, std::size_t bytes);

// A zeroed buffer of at least bytes, 64-byte aligned; from kHugePageBytes / 2 up, aligned to and
// a multiple of kHugePageBytes and advised before it is zeroed. Null for 0 bytes, nullptr when
// out of memory. Released with std::free.
void *allocateZeroed(std::size_t bytes);

// v's elements moved to memory advised as above (one copy, for data loaded into a vector).
template <typename T>
void moveToHugePages(std::vector<T> &v)
{
    if (v.size() * sizeof(T) < kHugePageBytes)
        return;
    std::vector<T> w;
    w.reserve(v.size());
    adviseHugePages(w.data(), w.capacity() * sizeof(T));
    w.assign(v.begin(), v.end());
    v.swap(w);
}

} // namespace syncopate
