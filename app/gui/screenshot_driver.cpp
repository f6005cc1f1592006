#include "app/gui/screenshot_driver.h"

#include <QApplication>
#include <QPixmap>
#include <QTimer>

#include <cstdio>

#include "app/gui/compare_view.h"
#include "app/gui/importance_view.h"
#include "app/gui/main_window.h"
#include "app/gui/model_tree_view.h"
#include "app/gui/run_view.h"
#include "widgets/loss_curve.h"

namespace cwb {

ScreenshotDriver::ScreenshotDriver(MainWindow* window, ScreenshotPlan plan) : QObject(window), mWindow(window), mPlan(std::move(plan)) {}

void ScreenshotDriver::start() { QTimer::singleShot(0, this, &ScreenshotDriver::next); }

void ScreenshotDriver::fail(const QString& why) {
    std::fprintf(stderr, "cwb --screenshot: %s\n", qPrintable(why));
    QApplication::exit(1);
}

void ScreenshotDriver::next() {
    if (!mPlan.computeKind.isEmpty()) {
        const QString kind = mPlan.computeKind;
        mPlan.computeKind.clear();
        ImportanceView* view = mWindow->importanceView();
        view->setKind(kind);
        view->setWindowSize(mPlan.samples, mPlan.tokens);
        connect(view, &ImportanceView::jobFinished, this, &ScreenshotDriver::next, Qt::QueuedConnection);
        if (!view->compute()) fail("cannot compute importance " + kind);
        return;
    }
    if (mPlan.runAll) {
        mPlan.runAll = false;
        connect(mWindow->runView(), &RunView::finished, this, [this](bool ok) {
            if (mPlan.grabAfterLossPoints > 0) return fail("the run ended before the loss curve had enough points");
            if (ok) next();
            else fail("the run failed");
        });
        if (!mWindow->runView()->runAll(true)) fail("cannot run the project");   // no question to answer here
        if (mPlan.grabAfterLossPoints > 0) {
            // A training step in progress: poll the live loss curve and grab while the run goes on.
            mWindow->showTab(MainWindow::RunTab);
            auto* poll = new QTimer(this);
            connect(poll, &QTimer::timeout, this, [this, poll] {
                const LossCurve* curve = mWindow->runView()->lossCurve();
                for (const QString& series : curve->seriesNames())
                    if (curve->pointCount(series) >= mPlan.grabAfterLossPoints) {
                        poll->stop();
                        grab();
                        return;
                    }
            });
            poll->start(250);
        }
        return;
    }
    static const QStringList tabs = {"importance", "pipeline", "run", "compare"};
    if (tabs.contains(mPlan.tab)) mWindow->showTab(MainWindow::Tab(tabs.indexOf(mPlan.tab)));
    if (!mPlan.metric.isEmpty()) mWindow->compareView()->setMetric(mPlan.metric);
    if (!mPlan.selectLayer.isEmpty()) mWindow->modelTree()->selectLayer(mPlan.selectLayer);
    QTimer::singleShot(300, this, &ScreenshotDriver::grab);   // lets the plots lay out and paint once
}

void ScreenshotDriver::grab() {
    if (!mWindow->grab().save(mPlan.output)) return fail("cannot write " + mPlan.output);
    std::fprintf(stderr, "wrote %s\n", qPrintable(mPlan.output));
    QApplication::exit(0);
}

} // namespace cwb
