// Time <-> pixel mapping of the timeline, a small value type tested without a GUI.
#pragma once

#include <cstdint>

namespace syncopate {

class TimeMapping {
public:
    TimeMapping() = default;
    // [startNs, endNs] of run time shown across widthPx pixels starting at leftPx.
    TimeMapping(double startNs, double endNs, double leftPx, double widthPx);

    double startNs() const { return m_start; }
    double endNs() const { return m_end; }
    double nsPerPixel() const { return m_nsPerPx; }
    double toPixel(double ns) const { return m_left + (ns - m_start) / m_nsPerPx; }
    double toTime(double px) const { return m_start + (px - m_left) * m_nsPerPx; }
    // Zoom by factor (> 1 zooms in) keeping the time under pixel px where it is.
    TimeMapping zoomedAt(double px, double factor) const;
    TimeMapping pannedBy(double pixels) const;
    bool isValid() const { return m_nsPerPx > 0; }

private:
    double m_start = 0, m_end = 1, m_left = 0, m_width = 1, m_nsPerPx = 1;
};

} // namespace syncopate
