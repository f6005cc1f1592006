#include "app/gui/gui_main.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>
#include <QScreen>

#include <cstdio>
#include <filesystem>

#include <ATen/Parallel.h>

#include "app/gui/main_window.h"
#include "app/gui/screenshot_driver.h"
#include "core/version.h"

// The icon lives in cwb_gui's resources; a static library needs its resources registered by name.
static void initResources() { Q_INIT_RESOURCE(cwb); }

namespace cwb {

bool isGuiInvocation(const std::vector<std::string>& args) {
    if (args.empty()) return true;
    if (args[0] == "--screenshot" || args[0] == "--threads") return true;
    std::error_code ec;
    return std::filesystem::exists(args[0], ec);
}

int runGui(int argc, char** argv) {
    // Without a display Qt would abort; on a headless server say what to do instead.
    if (qEnvironmentVariableIsEmpty("DISPLAY") && qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY") &&
        qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        std::fprintf(stderr, "cwb: no display for the GUI (DISPLAY is not set). Run a command instead (cwb --help), "
                             "or set QT_QPA_PLATFORM (e.g. offscreen).\n");
        return 2;
    }
    QApplication app(argc, argv);
    initResources();
    QApplication::setApplicationName(QStringLiteral("cwb"));
    QApplication::setOrganizationName(QStringLiteral("CompressionWorkbench"));
    QApplication::setApplicationDisplayName(QStringLiteral("Compression Workbench"));
    QApplication::setApplicationVersion(QString::fromLatin1(versionString()));
    QApplication::setWindowIcon(QIcon::fromTheme(QStringLiteral("cwb"), QIcon(QStringLiteral(":/cwb/cwb.svg"))));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Compression Workbench desktop GUI"));
    parser.addPositionalArgument(QStringLiteral("path"), QStringLiteral("a model (GGUF, HF folder, llama2.c .bin) or a .cwbproj project"));
    QCommandLineOption screenshot(QStringLiteral("screenshot"), QStringLiteral("grab the window into OUT.png and quit"), QStringLiteral("OUT.png"));
    QCommandLineOption tab(QStringLiteral("tab"), QStringLiteral("tab to show: importance, pipeline, run, compare"), QStringLiteral("TAB"));
    QCommandLineOption compute(QStringLiteral("compute-importance"), QStringLiteral("compute this importance kind first"), QStringLiteral("KIND"));
    QCommandLineOption runAll(QStringLiteral("run-all"), QStringLiteral("evaluate the base and every variant first"));
    QCommandLineOption whileRunning(QStringLiteral("grab-while-running"),
                                    QStringLiteral("with --run-all: grab the Run tab once a step has drawn N loss points"), QStringLiteral("N"));
    QCommandLineOption metric(QStringLiteral("metric"), QStringLiteral("Compare tab metric"), QStringLiteral("METRIC"));
    QCommandLineOption select(QStringLiteral("select-layer"), QStringLiteral("layer to select in the model tree"), QStringLiteral("LAYER"));
    QCommandLineOption size(QStringLiteral("size"), QStringLiteral("window size WxH"), QStringLiteral("WxH"));
    for (auto* o : {&screenshot, &tab, &compute, &runAll, &whileRunning, &metric, &select, &size}) {
        o->setFlags(QCommandLineOption::HiddenFromHelp);
        parser.addOption(*o);
    }
    // As the commands take it (the GUI refused it, GUI probe): 0, the default, takes what the machine has.
    QCommandLineOption threads(QStringLiteral("threads"), QStringLiteral("CPU threads for runs and measurements (0: all)"),
                               QStringLiteral("N"));
    parser.addOption(threads);
    parser.addHelpOption();
    if (!parser.parse(QApplication::arguments())) {
        std::fprintf(stderr, "cwb: %s\n", qPrintable(parser.errorText()));
        return 2;
    }
    if (parser.isSet(threads)) {
        bool number = false;
        const int count = parser.value(threads).toInt(&number);
        if (!number || count < 0 || count > 4096) {
            std::fprintf(stderr, "cwb: --threads must be 0..4096, got '%s'\n", qPrintable(parser.value(threads)));
            return 2;
        }
        if (count > 0) at::set_num_threads(count);
    }

    MainWindow window;
    if (!parser.isSet(screenshot)) window.restoreLayout(QGuiApplication::primaryScreen() ? QGuiApplication::primaryScreen()->availableGeometry() : QRect());
    if (parser.isSet(size)) {
        const QStringList wh = parser.value(size).split('x');
        if (wh.size() == 2) window.resize(wh[0].toInt(), wh[1].toInt());
    }
    window.show();
    const bool scripted = parser.isSet(screenshot);
    if (!parser.positionalArguments().isEmpty() && !window.openPath(parser.positionalArguments().front(), !scripted) && scripted)
        return 1;
    if (scripted) {
        ScreenshotPlan plan;
        plan.output = parser.value(screenshot);
        plan.tab = parser.value(tab);
        plan.computeKind = parser.value(compute);
        plan.runAll = parser.isSet(runAll);
        plan.grabAfterLossPoints = parser.value(whileRunning).toInt();
        plan.metric = parser.value(metric);
        plan.selectLayer = parser.value(select);
        (new ScreenshotDriver(&window, plan))->start();
    } else if (parser.positionalArguments().isEmpty()) {
        window.offerRecovery();
    }
    if (!scripted && parser.isSet(tab)) {
        static const QStringList tabs = {"importance", "pipeline", "run", "compare"};
        if (tabs.contains(parser.value(tab))) window.showTab(MainWindow::Tab(tabs.indexOf(parser.value(tab))));
    }
    return QApplication::exec();
}

} // namespace cwb
