#include <QApplication>
#include <QByteArray>
#include <QDir>
#include <QFile>
#include <unistd.h>
#include <QString>
#include <cmath>
#include <filesystem>

#include "app/batch/batch_charts.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "widgets/ab_chart.h"

namespace cwb {

namespace {

// Batch mode never opens a window: charts render on Qt's offscreen platform, so no display is needed.
void ensureApplication() {
    if (QApplication::instance()) return;
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    // Headless servers often have no session runtime folder; Qt warns without one, so give it a private one.
    if (qEnvironmentVariableIsEmpty("XDG_RUNTIME_DIR")) {
        static const QByteArray runtime = QDir::tempPath().toUtf8() + "/cwb-runtime-" + QByteArray::number(getuid());
        QDir().mkpath(QString::fromUtf8(runtime));
        QFile::setPermissions(QString::fromUtf8(runtime), QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
        qputenv("XDG_RUNTIME_DIR", runtime);
    }
    static int argc = 1;
    static char name[] = "cwb";
    static char* argv[] = {name, nullptr};
    new QApplication(argc, argv);   // lives until exit
}

struct ChartSpec {
    const char* metric;
    const char* title;
    const char* unit;
    bool withBase;
};

} // namespace

std::vector<std::string> renderCharts(const nlohmann::json& report, const std::string& dir, std::string* note) {
    ensureApplication();
    static const ChartSpec specs[] = {{"perplexity", "Perplexity", "", true},
                                      {"kl_mean", "KL divergence to the base (mean)", "nats", false},
                                      {"top1", "Top-1 agreement with the base", "fraction", false},
                                      {"bytes", "Model size", "bytes", true}};
    std::vector<std::string> written;
    for (const auto& spec : specs) {
        std::vector<AbSeries> series;
        for (const auto& v : report["variants"]) {
            const std::string name = v["name"];
            if (name == "base" && !spec.withBase) continue;
            for (const auto& m : v["metrics"])
                if (m["metric"] == spec.metric)
                    series.push_back({QString::fromStdString(name), m["reproduced"].get<double>(), m.value("error", 0.0)});
        }
        if (series.size() < 2 && spec.withBase) continue;
        if (series.empty()) continue;
        AbChart chart;
        chart.setMetric(spec.title, spec.unit, series, series.front().variant == QLatin1String("base"));
        const std::string file = std::string("chart-") + spec.metric + ".png";
        // Whole or not at all, as every file of the report: into a temporary name, renamed once saved.
        const std::string path = dir + "/" + file;
        std::string tmp;
        try {
            tmp = createSiblingFile(path);   // a name of its own: never a file that was there
        } catch (const Error&) {
            continue;
        }
        std::error_code ec;
        if (chart.savePng(QString::fromStdString(tmp), 900, 500)) std::filesystem::rename(tmp, path, ec);
        else ec = std::make_error_code(std::errc::io_error);
        if (ec) std::filesystem::remove(tmp, ec);
        else written.push_back(file);
    }
    if (written.empty() && note) *note = "no chart could be rendered";
    return written;
}

} // namespace cwb
