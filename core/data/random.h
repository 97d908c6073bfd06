// Seeded random numbers that give the same sequence on every platform (std's distributions are
// implementation-defined), and a seeded permutation computed per index without a table.
#pragma once

#include <cmath>
#include <cstdint>

namespace syncopate {

inline std::uint64_t splitmix64(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

class Rng {
public:
    explicit Rng(std::uint64_t seed, std::uint64_t stream = 0)
        : m_state(splitmix64(seed ^ splitmix64(stream + 0x51ed27ull))) {}

    std::uint64_t next()
    {
        m_state += 0x9e3779b97f4a7c15ull;
        std::uint64_t z = m_state;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 1).
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    // Uniform integer in [0, n).
    std::uint64_t below(std::uint64_t n) { return n ? next() % n : 0; }
    double normal()
    {
        // Box-Muller; 1 - u keeps the log finite.
        const double u = 1.0 - uniform(), v = uniform();
        return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
    }

private:
    std::uint64_t m_state;
};

// A bijection of [0, n) chosen by key: a 4-round Feistel network on the smallest even number of
// bits that covers n, walking the cycle until the value falls inside [0, n).
class IndexPermutation {
public:
    IndexPermutation(std::uint64_t n, std::uint64_t key) : m_n(n), m_key(key)
    {
        int bits = 2;
        while ((std::uint64_t(1) << bits) < n)
            bits += 2;
        m_halfBits = bits / 2;
        m_halfMask = (std::uint64_t(1) << m_halfBits) - 1;
    }

    std::uint64_t operator()(std::uint64_t i) const
    {
        std::uint64_t x = i;
        do
            x = round(x);
        while (x >= m_n);
        return x;
    }

private:
    std::uint64_t round(std::uint64_t x) const
    {
        std::uint64_t l = x >> m_halfBits, r = x & m_halfMask;
        for (std::uint64_t k = 0; k < 4; ++k) {
            const std::uint64_t f = splitmix64(r ^ splitmix64(m_key + k)) & m_halfMask;
            const std::uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        return (l << m_halfBits) | r;
    }

    std::uint64_t m_n, m_key;
    int m_halfBits;
    std::uint64_t m_halfMask;
};

} // namespace syncopate
