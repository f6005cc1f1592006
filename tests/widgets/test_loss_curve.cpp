// LossCurve: points per series, clearing, throttled redraws.
#include "widgets/loss_curve.h"
#include "widgets/plot_palette.h"

#include <QApplication>
#include <QtTest/QtTest>

#include <cmath>
#include <limits>

using cwb::LossCurve;

class TestLossCurve : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void pointsAddUpPerSeries();
    void ignoresNonFiniteValues();
    void clearRemovesEverything();
    void manyPointsStayCheap();
    void logAxisLabelsFitTheRange();
};

namespace {

// Pixels within a small distance of `color` (antialiased lines blend at their edges).
int pixelsNear(const QImage& image, const QColor& color)
{
    const QImage rgb = image.convertToFormat(QImage::Format_RGB32);
    int count = 0;
    for (int y = 0; y < rgb.height(); ++y)
        for (int x = 0; x < rgb.width(); ++x) {
            const QRgb p = rgb.pixel(x, y);
            count += std::abs(qRed(p) - color.red()) + std::abs(qGreen(p) - color.green()) + std::abs(qBlue(p) - color.blue()) < 40;
        }
    return count;
}

}  // namespace

void TestLossCurve::initTestCase()
{
    QVERIFY2(qobject_cast<QApplication*>(QCoreApplication::instance()),
             "widget tests need a QApplication (QTEST_MAIN with QT_WIDGETS_LIB defined)");
}

void TestLossCurve::pointsAddUpPerSeries()
{
    LossCurve curve;
    curve.resize(600, 400);
    curve.show();
    QVERIFY(QTest::qWaitForWindowExposed(&curve));
    QCOMPARE(curve.seriesCount(), 0);
    for (int step = 0; step < 10; ++step) {
        curve.addPoint(QStringLiteral("train"), step, 3.0 / (step + 1));
        if (step % 2 == 0)
            curve.addPoint(QStringLiteral("eval"), step, 3.5 / (step + 1));
    }
    curve.addPoint(QStringLiteral("train"), 3.5, 1.0);  // out of order: still counted
    QCOMPARE(curve.seriesCount(), 2);
    QCOMPARE(curve.pointCount(QStringLiteral("train")), 11);
    QCOMPARE(curve.pointCount(QStringLiteral("eval")), 5);
    QCOMPARE(curve.pointCount(QStringLiteral("unknown")), 0);
    QCOMPARE(curve.seriesNames(), (QStringList{QStringLiteral("train"), QStringLiteral("eval")}));
    QTest::qWait(80);  // let the throttled redraw run
    curve.flush();
    const QImage linear = curve.grab().toImage();
    QVERIFY2(pixelsNear(linear, cwb::plot::seriesColor(0)) > 50, "the train curve is drawn");
    QVERIFY2(pixelsNear(linear, cwb::plot::seriesColor(1)) > 20, "the eval curve is drawn");
    curve.setLogScale(true);
    curve.flush();
    QCOMPARE(curve.pointCount(QStringLiteral("train")), 11);
    // On a log axis the curves are drawn elsewhere (3/(step+1) spreads over decades), at once: flush() redraws now
    // (it queued the replot, so the picture stayed the linear one until the event loop ran).
    QVERIFY(curve.grab().toImage() != linear);
}

void TestLossCurve::ignoresNonFiniteValues()
{
    LossCurve curve;
    curve.addPoint(QStringLiteral("train"), 0, 2.0);
    curve.addPoint(QStringLiteral("train"), 1, std::numeric_limits<double>::infinity());
    curve.addPoint(QStringLiteral("train"), 2, std::numeric_limits<double>::quiet_NaN());
    curve.addPoint(QStringLiteral("train"), std::numeric_limits<double>::quiet_NaN(), 1.0);
    QCOMPARE(curve.pointCount(QStringLiteral("train")), 1);
    curve.flush();
}

void TestLossCurve::clearRemovesEverything()
{
    LossCurve curve;
    curve.addPoint(QStringLiteral("a"), 0, 1.0);
    curve.addPoint(QStringLiteral("b"), 0, 1.0);
    curve.clear();
    QCOMPARE(curve.seriesCount(), 0);
    QCOMPARE(curve.pointCount(QStringLiteral("a")), 0);
    curve.addPoint(QStringLiteral("a"), 0, 1.0);  // usable again
    QCOMPARE(curve.seriesCount(), 1);
    QCOMPARE(curve.pointCount(QStringLiteral("a")), 1);
}

void TestLossCurve::manyPointsStayCheap()
{
    LossCurve curve;
    curve.resize(600, 400);
    curve.show();
    QVERIFY(QTest::qWaitForWindowExposed(&curve));
    QElapsedTimer timer;
    timer.start();
    for (int step = 0; step < 20000; ++step)
        curve.addPoint(QStringLiteral("train"), step, 1.0 + 1.0 / (step + 1));
    QCOMPARE(curve.pointCount(QStringLiteral("train")), 20000);
    // Appending does not redraw per point (the timer does, at most every 50 ms); generous bound.
    QVERIFY2(timer.elapsed() < 2000, qPrintable(QString::number(timer.elapsed())));
    curve.flush();
}

// Regression (GUI probe): errors within one decade on the log axis got overlapping labels and half an axis bare; the
// legend covered the curves. Within a decade the labels are evenly spaced, across decades at powers of ten, and the
// legend sits below the plot.
void TestLossCurve::logAxisLabelsFitTheRange()
{
    LossCurve curve;
    curve.resize(600, 400);
    curve.show();
    curve.setLogScale(true);
    for (int i = 0; i < 8; ++i) {
        curve.addPoint("a", i, 0.012 + 0.001 * i);
        curve.addPoint("b", i, 0.013 + 0.001 * i);
    }
    curve.flush();
    QVERIFY(!curve.labelsDecades());
    QVERIFY(curve.legendOutsidePlot());
    curve.addPoint("a", 9, 5.0);   // now more than a decade
    curve.flush();
    QVERIFY(curve.labelsDecades());
}

QTEST_MAIN(TestLossCurve)
#include "test_loss_curve.moc"
