// LossCurve: points per series, clearing, throttled redraws.
#include "widgets/loss_curve.h"
#include "widgets/plot_palette.h"

#include <QApplication>
#include <QToolTip>
#include <QtTest/QtTest>

#include <algorithm>
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
    void zerosOnALogAxisAreDrawnOnAFloor();
    void hoverSaysWhichPointItIs();
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
// Log value axis: labels spread evenly on screen and a readable distance apart, from a decade or less to many decades,
// in a tall chart and a short one (seven labels were drawn into 100 pixels, and within a decade evenly spaced values
// bunched at the top; GUI probe).
void TestLossCurve::logAxisLabelsFitTheRange()
{
    LossCurve curve;
    curve.resize(600, 400);
    curve.show();
    QVERIFY(QTest::qWaitForWindowExposed(&curve));
    curve.setLogScale(true);
    const double line = QFontMetricsF(curve.font()).height();
    const auto pixelGaps = [&curve] {
        QVector<int> gaps;
        const QVector<double> ticks = curve.valueTicks();
        for (int i = 1; i < ticks.size(); ++i)
            gaps << std::abs(curve.valuePixel(ticks[i]) - curve.valuePixel(ticks[i - 1]));
        return gaps;
    };
    for (int i = 0; i < 8; ++i) {
        curve.addPoint("a", i, 0.012 + 0.001 * i);
        curve.addPoint("b", i, 0.013 + 0.001 * i);
    }
    curve.flush();
    QVERIFY(!curve.labelsDecades());
    QVERIFY(curve.legendOutsidePlot());
    QVERIFY2(curve.valueTicks().size() >= 3, qPrintable(QString::number(curve.valueTicks().size())));

    // One decade: 1-2-5 steps, nearly evenly spaced on screen.
    curve.clear();
    for (int i = 0; i <= 10; ++i)
        curve.addPoint("a", i, 0.01 * std::pow(10.0, i / 10.0));
    curve.flush();
    QVERIFY(!curve.labelsDecades());
    const QVector<int> gaps = pixelGaps();
    QVERIFY(gaps.size() >= 2);
    const auto [narrowest, widest] = std::minmax_element(gaps.begin(), gaps.end());
    QVERIFY2(*widest < 2 * *narrowest, qPrintable(QStringLiteral("gaps %1 to %2 px").arg(*narrowest).arg(*widest)));

    // Five decades: powers of ten; in a short chart fewer of them, still more than a line and a half apart.
    curve.clear();
    for (int i = 0; i < 30; ++i)
        curve.addPoint("a", i, 1e-4 * std::pow(1e4, i / 29.0));
    curve.flush();
    QVERIFY(curve.labelsDecades());
    const int tallTicks = int(curve.valueTicks().size());
    curve.resize(600, 170);
    QTRY_COMPARE(curve.height(), 170);
    curve.flush();
    QVERIFY(curve.labelsDecades());
    QVERIFY(curve.valueTicks().size() >= 2);
    QVERIFY(curve.valueTicks().size() < tallTicks);
    for (int gap : pixelGaps())
        QVERIFY2(gap >= 1.5 * line, qPrintable(QStringLiteral("labels %1 px apart, a line is %2").arg(gap).arg(line)));
}

// Regression (GUI probe): a layer reconstructed exactly (error 0) fell off the Compare tab's log axis, unseen.
void TestLossCurve::zerosOnALogAxisAreDrawnOnAFloor()
{
    LossCurve curve;
    curve.resize(600, 400);
    curve.show();
    QVERIFY(QTest::qWaitForWindowExposed(&curve));
    curve.setAxisLabels("layer", "error");
    curve.setLogScale(true);
    curve.addPoint("a", 0, 1e-3);
    curve.addPoint("a", 1, 0.0);
    curve.addPoint("a", 2, 1e-2);
    curve.addPoint("b", 0, 0.0);   // b's only other point is a single positive one: no line, only its marker is drawn
    curve.addPoint("b", 1, 5e-3);
    curve.flush();
    QCOMPARE(curve.pointCount("a"), 3);
    QCOMPARE(curve.pointCount("b"), 2);
    QVERIFY2(curve.valueAxisLabel().startsWith("error") && curve.valueAxisLabel().contains(QStringLiteral("○ = 0")),
             qPrintable(curve.valueAxisLabel()));
    const auto [lower, upper] = curve.valueRange();
    QVERIFY2(lower > 0 && lower < 1e-4 && upper > 1e-2, qPrintable(QStringLiteral("%1 .. %2").arg(lower).arg(upper)));
    const QImage image = curve.grab().toImage();
    const int floorY = curve.valuePixel(1e-4) * image.height() / curve.height();
    const QImage band = image.copy(0, std::max(0, floorY - 6), image.width(), 13);
    QVERIFY2(pixelsNear(band, cwb::plot::seriesColor(1)) > 4, "b's zero is drawn on the floor");

    // Back to a linear axis, the zeros are points of their curves again; and floors again on a log one.
    curve.setLogScale(false);
    curve.flush();
    QCOMPARE(curve.valueAxisLabel(), QString("error"));
    QCOMPARE(curve.pointCount("a"), 3);
    QVERIFY(curve.valueRange().first <= 0);
    curve.setLogScale(true);
    curve.flush();
    QCOMPARE(curve.pointCount("a"), 3);
    QVERIFY(curve.valueAxisLabel().contains(QStringLiteral("○")));
    QVERIFY(curve.valueRange().first > 0);
    curve.clear();
    QCOMPARE(curve.valueAxisLabel(), QString("error"));
    // Every value 0: the markers' height means nothing, and the label says so (they read as 1.0, GUI probe).
    curve.addPoint("a", 0, 0.0);
    curve.addPoint("a", 1, 0.0);
    curve.flush();
    QVERIFY2(curve.valueAxisLabel().endsWith("(○ = 0: all are)"), qPrintable(curve.valueAxisLabel()));
}

// Regression (GUI probe): the Compare tab's per-layer error chart drew a dot per layer with nothing to tell which
// layer a dot was; hovering one names its layer (or its step) and the value of every series there, a zero marker
// included, and a line hidden under another. The hover text is the plot's tooltip: the widget's own tooltip (what the
// chart measures) replaced it a moment later when it was shown on mouse moves (GUI probe).
void TestLossCurve::hoverSaysWhichPointItIs()
{
    LossCurve curve;
    curve.resize(600, 400);
    curve.setToolTip("what the chart measures");
    curve.show();
    QVERIFY(QTest::qWaitForWindowExposed(&curve));
    curve.setAxisLabels("layer", "error");
    curve.setLogScale(true);
    curve.setStepNames({"blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v"});
    curve.addPoint("int4", 0, 1e-3);
    curve.addPoint("int4", 1, 0.0);
    curve.addPoint("int4", 2, 2e-2);
    curve.addPoint("int4", 5, 4e-3);   // no name given for step 5
    curve.addPoint("int8", 0, 2e-4);
    curve.addPoint("int8", 2, 2.00001e-2);   // drawn on top of int4's
    curve.flush();

    const QPoint q = curve.pointPixel("int4", 0);
    QVERIFY(q.x() >= 0);
    const QString atQ = "blk.0.attn_q\nint4: 0.001\nint8: 0.0002";
    QCOMPARE(curve.pointTextAt(q), atQ);
    QCOMPARE(curve.pointTextAt(q + QPoint(3, -2)), atQ);   // near enough
    QCOMPARE(curve.pointTextAt(curve.pointPixel("int8", 0)), atQ);
    QCOMPARE(curve.pointTextAt(curve.pointPixel("int4", 1)), QString("blk.0.attn_k\nint4: 0"));   // a floor marker
    QCOMPARE(curve.pointTextAt(curve.pointPixel("int4", 5)), QString("layer 5\nint4: 0.004"));
    QCOMPARE(curve.pointTextAt(curve.pointPixel("int8", 2)), QString("blk.0.attn_v\nint4: 0.02\nint8: 0.0200001"));
    // Away from every point, and outside the plotted area: nothing.
    const QPoint v = curve.pointPixel("int4", 2);
    QCOMPARE(curve.pointTextAt(QPoint((q.x() + v.x()) / 2 + 20, 5)), QString());
    QCOMPARE(curve.pointTextAt(QPoint(2, curve.height() - 2)), QString());

    // The plot's tooltip event shows the point's text, and it stays (no other tooltip replaces it); off the points,
    // the widget's own tooltip.
    QWidget* plot = curve.childAt(q);
    QVERIFY(plot);
    const auto askTooltip = [&](const QPoint& at) {
        QHelpEvent help(QEvent::ToolTip, plot->mapFrom(&curve, at), plot->mapToGlobal(plot->mapFrom(&curve, at)));
        QApplication::sendEvent(plot, &help);
        QApplication::processEvents();
    };
    askTooltip(q);
    QTRY_VERIFY(QToolTip::isVisible());
    QCOMPARE(QToolTip::text(), atQ);
    QTest::qWait(1000);
    QCOMPARE(QToolTip::text(), atQ);
    QToolTip::hideText();
    askTooltip(QPoint((q.x() + v.x()) / 2 + 20, 5));
    QTRY_COMPARE(QToolTip::text(), QString("what the chart measures"));
    QToolTip::hideText();

    // A series' colour can be set (one colour per variant across charts), and a stale one dashed.
    curve.setSeriesStyle("int8", 4, true);
    curve.flush();
    QVERIFY2(pixelsNear(curve.grab().toImage(), cwb::plot::seriesColor(4)) > 10, "int8 is drawn in colour 4");

    curve.clear();   // names and styles go with the data
    curve.addPoint("x", 1, 0.5);
    curve.flush();
    QCOMPARE(curve.pointTextAt(curve.pointPixel("x", 1)), QString("layer 1\nx: 0.5"));
}

QTEST_MAIN(TestLossCurve)
#include "test_loss_curve.moc"
