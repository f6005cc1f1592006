#pragma once
// Drives the real window for documentation screenshots (the hidden --screenshot option): optionally computes
// an importance map or runs every variant through the GUI's own views, waits for their signals, then grabs
// the window into a PNG and quits. Exit code 0 on success, 1 if a step failed.
#include <QObject>
#include <QString>

namespace cwb {

class MainWindow;

struct ScreenshotPlan {
    QString output;            // PNG path
    QString tab;               // importance | pipeline | run | compare
    QString computeKind;       // importance kind to compute first; empty: show what is stored
    bool runAll = false;       // evaluate the base and every variant first
    int grabAfterLossPoints = 0;   // > 0: grab the Run tab during the run, once a loss curve has that many points
    QString metric;            // Compare tab metric
    QString selectLayer;       // model tree selection
    int samples = 8, tokens = 64;
};

class ScreenshotDriver : public QObject {
    Q_OBJECT
public:
    ScreenshotDriver(MainWindow* window, ScreenshotPlan plan);
    void start();

private:
    void next();
    void grab();
    void fail(const QString& why);
    MainWindow* mWindow;
    ScreenshotPlan mPlan;
};

} // namespace cwb
