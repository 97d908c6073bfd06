// Rank 0's clock as another rank sees it: offset(t) = a + b (t - t0), fitted to ping-pong
// measurements taken at the start of the run and every few seconds while it runs. Spans stream
// to rank 0 as the run goes, so each is put on rank 0's clock with the model known when it is
// sent: the offset at the start and the drift measured since (a clock running 20 ppm fast is
// 2 ms off after 100 s). The end of the run measures once more: how far the model was from it
// there (residual) bounds what the streamed spans were put off by.
#pragma once

#include "communicator.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace syncopate {

class ClockModel {
public:
    // No clock runs this far off: a fit past it means bad measurements (a round trip that
    // hid a scheduling delay), and the drift stays what it was.
    static constexpr double kMaxDriftPpm = 500.0;

    // A measurement made around local time atNs (the middle of its round trip).
    void add(std::int64_t atNs, ClockOffset m)
    {
        if (m_points.empty())
            m_t0 = atNs;
        m_points.push_back({atNs, m});
        fit();
    }

    bool empty() const { return m_points.empty(); }
    std::int64_t origin() const { return m_t0; }
    // Rank 0's time minus this rank's, at local time ns.
    std::int64_t offsetAt(std::int64_t ns) const
    {
        return m_a + std::llround(m_b * double(ns - m_t0));
    }
    double driftPpm() const { return m_b * 1e6; }
    int measurements() const { return int(m_points.size()); }

private:
    struct Point {
        std::int64_t at;
        ClockOffset m;
    };

    // Least squares, each measurement weighted by 1 / uncertainty^2 (a round trip of 40 us
    // counts a hundred times one of 400 us), around the first measurement's time so that the
    // sums stay small. Until two measurements lie a second apart the drift stays 0.
    void fit()
    {
        double sw = 0, st = 0, so = 0, stt = 0, sto = 0;
        std::int64_t span = 0;
        const double base = double(m_points.front().m.offsetNs);
        for (const Point &p : m_points) {
            const double u = double(std::max<std::int64_t>(p.m.uncertaintyNs, 1000));
            const double w = 1.0 / (u * u);
            const double t = double(p.at - m_t0), o = double(p.m.offsetNs) - base;
            sw += w;
            st += w * t;
            so += w * o;
            stt += w * t * t;
            sto += w * t * o;
            span = std::max(span, p.at - m_t0);
        }
        const double det = sw * stt - st * st;
        if (span < 1'000'000'000 || det <= 0) {
            // The best single measurement, no drift yet.
            const Point *best = &m_points.front();
            for (const Point &p : m_points)
                if (p.m.uncertaintyNs < best->m.uncertaintyNs)
                    best = &p;
            m_a = best->m.offsetNs;
            m_b = 0;
            return;
        }
        const double b = (sw * sto - st * so) / det;
        if (std::abs(b) * 1e6 > kMaxDriftPpm)
            return;
        // A drift smaller than twice its own standard error is noise of the round trips (two
        // measurements 2 s apart, each within 60 us, allow 30 ppm either way), and
        // extrapolating it would put spans further off than no drift does: then the offset is
        // the measurements' weighted mean and the drift 0.
        if (std::abs(b) < 2.0 * std::sqrt(sw / det)) {
            m_b = 0;
            m_a = std::llround(base + so / sw);
            return;
        }
        m_b = b;
        m_a = std::llround(base + (so - b * st) / sw);
    }

    std::vector<Point> m_points;
    std::int64_t m_t0 = 0;
    std::int64_t m_a = 0; // the offset at m_t0
    double m_b = 0;       // ns of offset per ns
};

} // namespace syncopate
