#include "timemapping.h"

#include <algorithm>

namespace syncopate {

TimeMapping::TimeMapping(double startNs, double endNs, double leftPx, double widthPx)
    : m_start(startNs), m_end(std::max(endNs, startNs + 1.0)), m_left(leftPx),
      m_width(std::max(1.0, widthPx)), m_nsPerPx((m_end - m_start) / m_width)
{
}

TimeMapping TimeMapping::zoomedAt(double px, double factor) const
{
    const double anchor = toTime(px);
    const double span = std::max(1.0, (m_end - m_start) / factor); // never below 1 ns
    const double fraction = (px - m_left) / m_width;
    const double start = anchor - fraction * span;
    return TimeMapping(start, start + span, m_left, m_width);
}

TimeMapping TimeMapping::pannedBy(double pixels) const
{
    const double shift = -pixels * m_nsPerPx;
    return TimeMapping(m_start + shift, m_end + shift, m_left, m_width);
}

} // namespace syncopate
