// Config parsing: defaults resolve, and every bad input names the key, the value and what is
// allowed.
#include "config.h"
#include "session.h"

#include <QTemporaryDir>
#include <QTest>

#include <filesystem>
#include <fstream>

using namespace syncopate;
using nlohmann::json;

class TestConfig : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void defaultsResolve();
    void dataPathsBesideTheConfig();
    void oversubscriptionIsSaid();
    void errors_data();
    void errors();
    void assignments();
    void modesResolve();
    void everyPresetIsValid();
    void resolvedConfigRoundTrips();
    void deviceSpecs();
};

void TestConfig::defaultsResolve()
{
    const RunConfig c = parseConfig(json::object());
    QCOMPARE(c.workers, 4);
    QCOMPARE(c.mode, std::string("sync"));
    QCOMPARE(c.layers, (std::vector<int>{32, 256, 256, 10}));
    QCOMPARE(c.lr, 0.1);
    QCOMPARE(c.samples, std::int64_t(8192));
    QCOMPARE(c.slowdown, std::vector<double>(4, 1.0));
    QCOMPARE(parseConfig(json{{"train", {{"optimizer", "adam"}}}}).lr, 1e-3);
    QCOMPARE(parseConfig(json{{"data.source", "fashion-mnist"}}).layers,
             (std::vector<int>{784, 256, 10}));
}

void TestConfig::errors_data()
{
    QTest::addColumn<QString>("input");
    QTest::addColumn<QString>("field");
    QTest::addColumn<QString>("message");
    QTest::newRow("zero workers") << R"({"workers": 0})" << "workers"
                                  << "workers = 0: expected an integer between 1 and 256";
    QTest::newRow("fractional workers") << R"({"workers": 2.5})" << "workers" << "integer";
    QTest::newRow("negative lr") << R"({"train": {"lr": -0.1}})" << "train.lr"
                                 << "train.lr = -0.1: expected a number";
    QTest::newRow("unknown optimizer")
        << R"({"train.optimizer": "adamw"})" << "train.optimizer"
        << R"(expected one of sgd, momentum, adam (did you mean "adam"?))";
    QTest::newRow("unknown key") << R"({"train": {"learning_rate": 0.1}})"
                                 << "train.learning_rate" << "unknown key";
    QTest::newRow("misspelt key") << R"({"worker": 4})" << "worker"
                                  << R"(did you mean "workers"?)";
    QTest::newRow("key without section") << R"({"lr": 0.1})" << "lr"
                                         << R"(did you mean "train.lr"?)";
    QTest::newRow("string for number") << R"({"train.steps": "ten"})" << "train.steps"
                                       << "expected an integer";
    QTest::newRow("one width") << R"({"model.layers": [4]})" << "model.layers"
                               << "at least two widths";
    QTest::newRow("zero width") << R"({"model.layers": [4, 0, 2]})" << "model.layers"
                                << "every element must be between 1 and 65536, found 0";
    QTest::newRow("fashion widths") << R"({"data.source": "fashion-mnist", "model.layers": [100, 10]})"
                                    << "model.layers" << "784 inputs";
    QTest::newRow("spiral widths") << R"({"data.source": "spirals", "model.layers": [3, 8, 3]})"
                                   << "model.layers" << "2 inputs";
    QTest::newRow("slowdown count") << R"({"workers": 2, "workers_slowdown": [1, 2, 3]})"
                                    << "workers_slowdown" << "expected 2 factors";
    QTest::newRow("slowdown below one") << R"({"workers_slowdown": [1, 0.5, 1, 1]})"
                                        << "workers_slowdown" << "found 0.5";
    QTest::newRow("idx without files") << R"({"data.source": "idx"})" << "data.images"
                                       << "needs an IDX image file";
    QTest::newRow("bad mode") << R"({"mode": "syncc"})" << "mode" << R"(did you mean "sync"?)";
    QTest::newRow("bad device") << R"({"device": "tpu"})" << "device" << "expected \"cpu\"";
    QTest::newRow("empty GPU list") << R"({"device": "cuda:"})" << "device" << "\"cuda:0,2\"";
    QTest::newRow("GPU not a number") << R"({"device": "cuda:a"})" << "device" << "\"cuda:0,2\"";
    QTest::newRow("empty GPU in list") << R"({"device": "cuda:0,,1"})" << "device" << "\"cuda:0,2\"";
    QTest::newRow("trailing comma") << R"({"device": "cuda:1,"})" << "device" << "\"cuda:0,2\"";
    QTest::newRow("negative GPU") << R"({"device": "cuda:-1"})" << "device" << "\"cuda:0,2\"";
    QTest::newRow("GPU twice") << R"({"device": "cuda:0,0"})" << "device" << "listed twice";
    QTest::newRow("tf32 not a bool") << R"({"device.tf32": "yes"})" << "device.tf32" << "true or false";
    QTest::newRow("staleness below -1") << R"({"async.max_staleness": -2})"
                                        << "async.max_staleness" << "between -1 and 1000000";
    QTest::newRow("object for leaf") << R"({"workers": {"n": 2}})" << "workers" << "integer";
}

void TestConfig::errors()
{
    QFETCH(QString, input);
    QFETCH(QString, field);
    QFETCH(QString, message);
    try {
        parseConfig(json::parse(input.toStdString()));
        QFAIL("no error raised");
    } catch (const ConfigError &e) {
        const QString what = QString::fromStdString(e.what());
        QVERIFY2(what.contains(message), qPrintable(what));
        QVERIFY2(what.contains(field), qPrintable(what));
        QVERIFY(std::find(e.fields().begin(), e.fields().end(), field.toStdString()) !=
                e.fields().end());
    }
}

void TestConfig::assignments()
{
    json flat = json::object();
    applyAssignment(flat, "train.lr=0.05");
    applyAssignment(flat, "workers_slowdown=[1,3]");
    applyAssignment(flat, "data.images=/tmp/x=y.idx");
    applyAssignment(flat, "data.shuffle=false");
    applyAssignment(flat, "workers=2");
    QCOMPARE(flat["train.lr"].get<double>(), 0.05);
    QCOMPARE(flat["data.images"].get<std::string>(), std::string("/tmp/x=y.idx"));
    QCOMPARE(flat["data.shuffle"].get<bool>(), false);
    const RunConfig c = parseConfig(flat);
    QCOMPARE(c.slowdown, (std::vector<double>{1, 3}));
    QVERIFY_THROWS_EXCEPTION(ConfigError, applyAssignment(flat, "novalue"));
}

void TestConfig::modesResolve()
{
    const RunConfig c = parseConfig(json{{"mode", "checkpointed"},
                                         {"model", {{"layers", {8, 16, 16, 16, 16, 16, 4}}}}});
    QVERIFY(c.checkpoint);
    QCOMPARE(c.checkpointEvery, 3); // ceil(sqrt(6 linear layers))
    QVERIFY(!c.async());
    QVERIFY(parseConfig(json{{"mode", "async"}}).async());
}

void TestConfig::everyPresetIsValid()
{
    const auto presets = listPresets();
    QVERIFY(!presets.empty());
    for (const auto &p : presets) {
        QVERIFY2(!p.description.empty(), p.name.c_str());
        try {
            parseConfig(p.config);
        } catch (const ConfigError &e) {
            QFAIL(qPrintable(QString::fromStdString(p.name + ": " + e.what())));
        }
    }
    QVERIFY_THROWS_EXCEPTION(ConfigError, loadPreset("no-such-preset"));
}

void TestConfig::resolvedConfigRoundTrips()
{
    const RunConfig a = parseConfig(json{{"mode", "async"}, {"workers", 3}, {"jitter", 0.2}});
    const RunConfig b = parseConfig(a.toJson());
    QVERIFY(b.toJson() == a.toJson());
}

void TestConfig::deviceSpecs()
{
    QVERIFY(!parseDeviceSpec("cpu").cuda);
    QVERIFY(parseDeviceSpec("cuda").cuda);
    QVERIFY(parseDeviceSpec("cuda").gpus.empty());
    QCOMPARE(parseDeviceSpec("cuda:0").gpus, (std::vector<int>{0}));
    QCOMPARE(parseDeviceSpec("cuda:2,0,7").gpus, (std::vector<int>{2, 0, 7}));
    // Syntax is the config's business; whether the GPUs exist is checked when a run starts.
    const RunConfig c = parseConfig(json{{"device", "cuda:1,3"}, {"device.tf32", true}});
    QCOMPARE(c.device, std::string("cuda:1,3"));
    QVERIFY(c.tf32);
    QVERIFY(parseConfig(c.toJson()).tf32);
    // "device" is the spec string, so tf32 is written dotted, never nested under it.
    QVERIFY_THROWS_EXCEPTION(ConfigError, parseConfig(json{{"device", {{"tf32", true}}}}));
}

// More CPU workers than free cores: said (with how many fit), never an error; GPU workers and
// workers that fit are not.
void TestConfig::oversubscriptionIsSaid()
{
    RunConfig c = parseConfig(nlohmann::json{{"workers", 4}});
    const std::string w = oversubscriptionWarning(c, CoreBudget{2, 0.2});
    QVERIFY2(w.find("4 workers on 2 free cores (2 CPUs, load 0.2)") != std::string::npos, w.c_str());
    QVERIFY2(w.find("2 workers would fit") != std::string::npos, w.c_str());
    QVERIFY(oversubscriptionWarning(c, CoreBudget{4, 0.0}).empty());
    // Other programs keep cores busy: a load of 2.6 on 4 CPUs leaves 1.
    const std::string busy = oversubscriptionWarning(c, CoreBudget{4, 2.6});
    QVERIFY2(busy.find("on 1 free core (") != std::string::npos && busy.find("1 worker would fit") != std::string::npos,
             busy.c_str());
    QCOMPARE(CoreBudget({2, 9.0}).free(), 1); // never fewer than one
    c.device = "cuda";
    QVERIFY(oversubscriptionWarning(c, CoreBudget{1, 0.0}).empty());
    const CoreBudget here = coreBudget();
    QVERIFY(here.cpus >= 1 && here.load >= 0);
}

// A config's relative data paths: its working folder's file where there is one, else the one
// beside the config file; absolute paths and missing files are left as they are.
void TestConfig::dataPathsBesideTheConfig()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    std::filesystem::create_directories(d + "/data");
    std::ofstream(d + "/data/img.idx") << "x";
    nlohmann::json flat = {{"data.images", "data/img.idx"}, {"data.labels", "data/missing.idx"},
                           {"eval.images", "/abs/img.idx"}, {"train.lr", 0.1}};
    resolveDataPaths(flat, d + "/cfg.json");
    QCOMPARE(flat["data.images"].get<std::string>(), d + "/data/img.idx");
    QCOMPARE(flat["data.labels"].get<std::string>(), std::string("data/missing.idx"));
    QCOMPARE(flat["eval.images"].get<std::string>(), std::string("/abs/img.idx"));
    QCOMPARE(flat["train.lr"].get<double>(), 0.1);
}

QTEST_APPLESS_MAIN(TestConfig)
#include "tst_config.moc"
