// ScoreHistogram: bin counts computed by hand for small inputs; the widget draws them; its colours, and the
// other charts', follow a dark palette set on the whole application (as the system's dark mode does).
#include <QApplication>
#include <QtTest/QtTest>

#include <cmath>
#include <limits>

#include "widgets/ab_chart.h"
#include "widgets/importance_heatmap.h"
#include "widgets/score_histogram.h"

using namespace cwb;

class TestScoreHistogram : public QObject {
    Q_OBJECT
private slots:
    void binsByHand_data();
    void binsByHand();
    void widgetShowsTheCounts();
    void followsTheApplicationPalette();
};

void TestScoreHistogram::binsByHand_data() {
    QTest::addColumn<std::vector<double>>("values");
    QTest::addColumn<int>("bins");
    QTest::addColumn<std::vector<int>>("counts");
    QTest::addColumn<double>("low");
    QTest::addColumn<double>("high");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    // [0, 4] in 4 bins of width 1: 0 and 0.5 → bin 0, 1 → bin 1, 3.9 → bin 3, 4 (the maximum) → last bin.
    QTest::newRow("edges") << std::vector<double>{0, 0.5, 1, 3.9, 4} << 4 << std::vector<int>{2, 1, 0, 2} << 0.0 << 4.0;
    QTest::newRow("nan and inf skipped") << std::vector<double>{nan, 1, inf, 3} << 2 << std::vector<int>{1, 1} << 1.0 << 3.0;
    QTest::newRow("all equal") << std::vector<double>{2, 2, 2} << 10 << std::vector<int>{3} << 2.0 << 2.0;
    QTest::newRow("empty") << std::vector<double>{} << 5 << std::vector<int>{} << 0.0 << 0.0;
    QTest::newRow("negative") << std::vector<double>{-2, -1, 0, 1, 2} << 2 << std::vector<int>{2, 3} << -2.0 << 2.0;
}

void TestScoreHistogram::binsByHand() {
    QFETCH(std::vector<double>, values);
    QFETCH(int, bins);
    QFETCH(std::vector<int>, counts);
    QFETCH(double, low);
    QFETCH(double, high);
    const Histogram h = makeHistogram(values, bins);
    QCOMPARE(h.counts, counts);
    QCOMPARE(h.low, low);
    QCOMPARE(h.high, high);
}

void TestScoreHistogram::widgetShowsTheCounts() {
    ScoreHistogram widget;
    std::vector<double> values;
    for (int i = 0; i < 100; ++i) values.push_back(double(i));
    widget.setScores("block 3", "score", values, 10);
    QCOMPARE(widget.title(), QString("block 3"));
    QCOMPARE(widget.histogram().counts, std::vector<int>(10, 10));
    widget.clear();
    QVERIFY(widget.histogram().counts.empty());
}

void TestScoreHistogram::followsTheApplicationPalette() {
    const QPalette original = QApplication::palette();
    ScoreHistogram histogram;
    histogram.setScores("block 0", "score", {1, 2, 3, 3, 4}, 4);
    ImportanceHeatmap heatmap;
    HeatmapData data;
    data.rowLabels = {"a", "b"};
    data.columnLabels = {"x", "y"};
    data.values = {1, 2, 3, 4};
    QVERIFY(heatmap.setScores(data));
    for (QWidget* w : {static_cast<QWidget*>(&histogram), static_cast<QWidget*>(&heatmap)}) {
        w->resize(500, 300);
        w->show();
        QVERIFY(QTest::qWaitForWindowExposed(w));
    }
    QVERIFY(histogram.backgroundColor() != QColor(20, 22, 28));

    QPalette dark = original;
    dark.setColor(QPalette::Window, QColor(32, 33, 36));
    dark.setColor(QPalette::Base, QColor(20, 22, 28));
    dark.setColor(QPalette::WindowText, QColor(235, 235, 240));
    dark.setColor(QPalette::Text, QColor(235, 235, 240));
    QApplication::setPalette(dark);
    QTRY_COMPARE(histogram.backgroundColor(), QColor(20, 22, 28));
    QCOMPARE(histogram.textColor(), QColor(235, 235, 240));
    QTRY_COMPARE(histogram.grab().toImage().pixelColor(0, 0), QColor(20, 22, 28));
    QTRY_COMPARE(heatmap.grab().toImage().pixelColor(0, 0), QColor(20, 22, 28));
    QApplication::setPalette(original);
    QTRY_VERIFY(histogram.backgroundColor() != QColor(20, 22, 28));
}

QTEST_MAIN(TestScoreHistogram)
#include "test_score_histogram.moc"
