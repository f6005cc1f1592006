// AbChart: bars per variant, error bars, offscreen PNG export.
#include "widgets/ab_chart.h"
#include "widgets/plot_palette.h"

#include <QApplication>
#include <QImage>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <limits>

using cwb::AbChart;
using cwb::AbSeries;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Pixels of exactly this colour (a bar's fill).
int pixelsOf(const QImage& image, const QColor& color)
{
    const QImage rgb = image.convertToFormat(QImage::Format_RGB32);
    int count = 0;
    for (int y = 0; y < rgb.height(); ++y)
        for (int x = 0; x < rgb.width(); ++x)
            count += (rgb.pixel(x, y) & 0xFFFFFFu) == (color.rgb() & 0xFFFFFFu);
    return count;
}

std::vector<AbSeries> baselineAndThree(double error)
{
    return {{QStringLiteral("fp16"), 5.91, error},
            {QStringLiteral("int8"), 5.93, error},
            {QStringLiteral("int4 gptq"), 6.12, error},
            {QStringLiteral("int4 rtn"), 6.87, error}};
}

}  // namespace

class TestAbChart : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void barsAsGiven_data();
    void barsAsGiven();
    void replacesPreviousMetric();
    void negativeAndMissingValues();
    void savePngOffscreen_data();
    void savePngOffscreen();
    void followsPalette();
};

void TestAbChart::initTestCase()
{
    QVERIFY2(qobject_cast<QApplication*>(QCoreApplication::instance()),
             "widget tests need a QApplication (QTEST_MAIN with QT_WIDGETS_LIB defined)");
}

void TestAbChart::barsAsGiven_data()
{
    QTest::addColumn<double>("error");
    QTest::addColumn<bool>("errorBars");
    QTest::newRow("with errors") << 0.04 << true;
    QTest::newRow("zero errors") << 0.0 << false;
    QTest::newRow("NaN errors") << kNaN << false;
    QTest::newRow("negative errors") << -1.0 << false;
}

void TestAbChart::barsAsGiven()
{
    QFETCH(double, error);
    QFETCH(bool, errorBars);
    AbChart chart;
    const std::vector<AbSeries> series = baselineAndThree(error);
    chart.setMetric(QStringLiteral("perplexity"), QString(), series);
    chart.resize(600, 400);
    chart.show();
    QVERIFY(QTest::qWaitForWindowExposed(&chart));

    QCOMPARE(chart.metric(), QStringLiteral("perplexity"));
    QCOMPARE(chart.seriesCount(), 4);
    for (int i = 0; i < 4; ++i) {
        QCOMPARE(chart.barValue(i), series[size_t(i)].value);
        QCOMPARE(chart.variantName(i), series[size_t(i)].variant);
        QCOMPARE(chart.barError(i), errorBars ? error : 0.0);
    }
    QVERIFY(std::isnan(chart.barValue(4)));
    QVERIFY(std::isnan(chart.barValue(-1)));
    QCOMPARE(chart.hasErrorBars(), errorBars);
}

void TestAbChart::replacesPreviousMetric()
{
    AbChart chart;
    chart.setMetric(QStringLiteral("perplexity"), QString(), baselineAndThree(0.1));
    QVERIFY(chart.hasErrorBars());
    std::vector<AbSeries> latency = {{QStringLiteral("fp16"), 12.5, kNaN}, {QStringLiteral("int4"), 7.25, 0.0}};
    chart.setMetric(QStringLiteral("latency"), QStringLiteral("ms/token"), latency);
    QVERIFY(chart.hasBaseline());
    chart.setMetric(QStringLiteral("kl"), QStringLiteral("nats"), latency, false);   // every bar a variant
    QVERIFY(!chart.hasBaseline());
    QCOMPARE(chart.seriesCount(), 2);
    chart.setMetric(QStringLiteral("latency"), QStringLiteral("ms/token"), latency);
    QCOMPARE(chart.metric(), QStringLiteral("latency"));
    QCOMPARE(chart.unit(), QStringLiteral("ms/token"));
    QCOMPARE(chart.seriesCount(), 2);
    QCOMPARE(chart.barValue(1), 7.25);
    QVERIFY(!chart.hasErrorBars());
    QVERIFY(!chart.isDrawnStale(0) && !chart.isDrawnStale(1));
    latency[1].stale = true;   // measured from what changed since: hatched
    chart.setMetric(QStringLiteral("latency"), QStringLiteral("ms/token"), latency);
    QVERIFY(!chart.isDrawnStale(0));
    QVERIFY(chart.isDrawnStale(1));
    QVERIFY(!chart.isDrawnStale(2));

    // Errors on some bars only.
    latency[1].error = 0.5;
    chart.setMetric(QStringLiteral("latency"), QStringLiteral("ms/token"), latency);
    QVERIFY(chart.hasErrorBars());
    QCOMPARE(chart.barError(0), 0.0);
    QCOMPARE(chart.barError(1), 0.5);

    chart.clear();
    QCOMPARE(chart.seriesCount(), 0);
    QVERIFY(!chart.hasErrorBars());
}

void TestAbChart::negativeAndMissingValues()
{
    AbChart chart;
    chart.setMetric(QStringLiteral("Δ accuracy"), QStringLiteral("%"),
                    {{QStringLiteral("baseline"), 0.0, 0.0},
                     {QStringLiteral("a"), -1.5, 0.2},
                     {QStringLiteral("b"), kNaN, 0.3}});
    chart.resize(500, 300);
    chart.show();
    QVERIFY(QTest::qWaitForWindowExposed(&chart));
    QCOMPARE(chart.seriesCount(), 3);
    QCOMPARE(chart.barValue(1), -1.5);
    QVERIFY(std::isnan(chart.barValue(2)));  // an empty slot, no bar
    QCOMPARE(chart.barError(2), 0.0);        // no error bar without a value
}

void TestAbChart::savePngOffscreen_data()
{
    QTest::addColumn<bool>("shown");
    QTest::addColumn<QSize>("size");
    QTest::newRow("hidden widget") << false << QSize(800, 450);
    QTest::newRow("shown widget, other size") << true << QSize(320, 1000);
}

void TestAbChart::savePngOffscreen()
{
    QFETCH(bool, shown);
    QFETCH(QSize, size);
    AbChart chart;
    chart.setMetric(QStringLiteral("perplexity"), QString(), baselineAndThree(0.05));
    if (shown) {
        chart.resize(600, 400);
        chart.show();
        QVERIFY(QTest::qWaitForWindowExposed(&chart));
    }
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("ab.png"));
    QVERIFY(chart.savePng(path, size.width(), size.height()));
    QVERIFY(QFileInfo(path).size() > 0);
    QImage image;
    QVERIFY(image.load(path, "PNG"));
    QCOMPARE(image.size(), size);
    if (shown)
        QCOMPARE(chart.size(), QSize(600, 400));  // exporting does not resize the widget
    // The bars are in the picture: the "int4 rtn" bar (6.87) covers more of its colour than "int8" (5.93) of its own,
    // and without a value it is gone.
    const int int8Pixels = pixelsOf(image, cwb::plot::seriesColor(0));
    const int rtnPixels = pixelsOf(image, cwb::plot::seriesColor(2));
    QVERIFY2(int8Pixels > 100 && rtnPixels > int8Pixels, qPrintable(QString("%1, %2").arg(int8Pixels).arg(rtnPixels)));
    std::vector<AbSeries> withoutRtn = baselineAndThree(0.05);
    withoutRtn[3].value = kNaN;
    chart.setMetric(QStringLiteral("perplexity"), QString(), withoutRtn);
    const QString without = dir.filePath(QStringLiteral("without.png"));
    QVERIFY(chart.savePng(without, size.width(), size.height()));
    QVERIFY(image.load(without, "PNG"));
    QCOMPARE(pixelsOf(image, cwb::plot::seriesColor(2)), 0);

    QVERIFY(!chart.savePng(dir.filePath(QStringLiteral("zero.png")), 0, 100));
    QVERIFY(!chart.savePng(dir.filePath(QStringLiteral("missing/dir/ab.png")), 100, 100));
}

void TestAbChart::followsPalette()
{
    AbChart chart;
    chart.setMetric(QStringLiteral("perplexity"), QString(), baselineAndThree(0.05));
    chart.resize(600, 400);
    chart.show();
    QVERIFY(QTest::qWaitForWindowExposed(&chart));
    QPalette dark = chart.palette();
    dark.setColor(QPalette::Base, QColor(25, 25, 30));
    dark.setColor(QPalette::WindowText, QColor(220, 220, 220));
    chart.setPalette(dark);
    QTRY_COMPARE(chart.grab().toImage().pixelColor(0, 0), QColor(25, 25, 30));
    // The exported PNG uses the palette too.
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("dark.png"));
    QVERIFY(chart.savePng(path, 400, 300));
    QCOMPARE(QImage(path).pixelColor(0, 0), QColor(25, 25, 30));
}

QTEST_MAIN(TestAbChart)
#include "test_ab_chart.moc"
