// Helpers shared by the engine tests: small runs from inline configs.
#pragma once

#include "engine.h"
#include "session.h"

#include <QTest>

namespace syncopate::test {

// Sanitizers slow some threads far more than others, so ratios of times mean nothing there.
constexpr bool underSanitizer()
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    return true;
#else
    return false;
#endif
}

inline PreparedRun prepare(const nlohmann::json &config) { return prepareRun(config); }

// Runs to the end (or fails the test after timeoutMs).
// With outputDir, the run is streamed there (and events() keeps every record too).
inline std::unique_ptr<Engine> runToEnd(const nlohmann::json &config, int timeoutMs = 60000,
                                        const std::string &outputDir = {})
{
    PreparedRun p = prepareRun(config);
    auto e = std::make_unique<Engine>(p.config, p.train, p.eval);
    if (!outputDir.empty()) {
        e->setOutputDirectory(outputDir);
        e->setRetention(Engine::Retention::All);
    }
    e->start();
    if (!e->waitFor(std::chrono::milliseconds(timeoutMs)))
        qFatal("run did not finish in %d ms", timeoutMs);
    return e;
}

inline double maxRelativeDifference(const std::vector<float> &a, const std::vector<float> &b)
{
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = std::abs(double(a[i]) - b[i]);
        worst = std::max(worst, d / std::max(1e-3, std::abs(double(b[i]))));
    }
    return worst;
}

inline double maxAbsoluteDifference(const std::vector<float> &a, const std::vector<float> &b)
{
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    return worst;
}

} // namespace syncopate::test
