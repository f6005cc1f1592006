// ImportanceHeatmap: the cells shown, pixel <-> cell mapping, tooltips, clicks, selection, refusals.
#include "widgets/importance_heatmap.h"

#include <QApplication>
#include <QSignalSpy>
#include <QToolTip>
#include <QtTest/QtTest>

#include <cmath>
#include <limits>

using cwb::HeatmapData;
using cwb::ImportanceHeatmap;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// 3 rows × 4 columns, every value distinct and not a "round" number.
HeatmapData sampleMap()
{
    HeatmapData data;
    data.title = QStringLiteral("Sensitivity");
    data.rowLabels = {QStringLiteral("layer 0"), QStringLiteral("layer 1"), QStringLiteral("layer 2")};
    data.columnLabels = {QStringLiteral("attn.q"), QStringLiteral("attn.k"), QStringLiteral("attn.v"),
                         QStringLiteral("mlp.up")};
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 4; ++c)
            data.values.push_back(0.1 * r + 0.0123456789 * (c + 1) - 0.05);
    data.unit = QStringLiteral("nats");
    return data;
}

}  // namespace

class TestImportanceHeatmap : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void showsGivenScores();
    void mappingFollowsResize();
    void outsideGivesNaN();
    void toolTipHasValueAndLabels();
    void clickEmitsCell();
    void keyboardMovesAndPicks();
    void missingValueCell();
    void selectCell();
    void refusesMismatchedSize_data();
    void refusesMismatchedSize();
    void emptyAndSingleCell();
    void followsPalette();
};

void TestImportanceHeatmap::initTestCase()
{
    QVERIFY2(qobject_cast<QApplication*>(QCoreApplication::instance()),
             "widget tests need a QApplication (QTEST_MAIN with QT_WIDGETS_LIB defined)");
}

void TestImportanceHeatmap::showsGivenScores()
{
    ImportanceHeatmap heatmap;
    const HeatmapData data = sampleMap();
    QVERIFY(heatmap.setScores(data));
    heatmap.resize(600, 400);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));

    QCOMPARE(heatmap.rowCount(), 3);
    QCOMPARE(heatmap.columnCount(), 4);
    for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 4; ++c) {
            const QPoint center = heatmap.cellCenter(r, c);
            QVERIFY(heatmap.rect().contains(center));
            int row = -1;
            int column = -1;
            const double value = heatmap.valueAt(center, &row, &column);
            QCOMPARE(row, r);
            QCOMPARE(column, c);
            QCOMPARE(value, data.values[size_t(r * 4 + c)]);  // exact: same double
            QCOMPARE(heatmap.value(r, c), data.values[size_t(r * 4 + c)]);
        }
    }
    // Row 0 is drawn at the top, column 0 at the left.
    QVERIFY(heatmap.cellCenter(0, 0).y() < heatmap.cellCenter(2, 0).y());
    QVERIFY(heatmap.cellCenter(0, 0).x() < heatmap.cellCenter(0, 3).x());
    QCOMPARE(heatmap.cellCenter(3, 0), QPoint(-1, -1));
}

void TestImportanceHeatmap::mappingFollowsResize()
{
    ImportanceHeatmap heatmap;
    QVERIFY(heatmap.setScores(sampleMap()));
    heatmap.resize(600, 400);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));
    const QPoint before = heatmap.cellCenter(2, 3);
    heatmap.resize(900, 700);
    QTRY_COMPARE(heatmap.size(), QSize(900, 700));
    const QPoint after = heatmap.cellCenter(2, 3);
    QVERIFY(after != before);
    int row = -1;
    int column = -1;
    heatmap.valueAt(after, &row, &column);
    QCOMPARE(row, 2);
    QCOMPARE(column, 3);
}

void TestImportanceHeatmap::outsideGivesNaN()
{
    ImportanceHeatmap heatmap;
    QVERIFY(heatmap.setScores(sampleMap()));
    heatmap.resize(600, 400);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));
    for (const QPoint& p : {QPoint(1, 1), QPoint(-20, 50), QPoint(599, 399), QPoint(5000, 5000)}) {
        int row = 7;
        int column = 7;
        QVERIFY2(std::isnan(heatmap.valueAt(p, &row, &column)), qPrintable(QStringLiteral("at %1,%2").arg(p.x()).arg(p.y())));
        QCOMPARE(row, -1);
        QCOMPARE(column, -1);
        QVERIFY(heatmap.toolTipAt(p).isEmpty());
    }
    QVERIFY(std::isnan(heatmap.valueAt(QPoint(1, 1))));  // null out-pointers are fine
}

void TestImportanceHeatmap::toolTipHasValueAndLabels()
{
    ImportanceHeatmap heatmap;
    const HeatmapData data = sampleMap();
    QVERIFY(heatmap.setScores(data));
    heatmap.resize(600, 400);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));
    for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 4; ++c) {
            const QString tip = heatmap.toolTipAt(heatmap.cellCenter(r, c));
            const double value = data.values[size_t(r * 4 + c)];
            QVERIFY2(tip.contains(QString::number(value, 'g', QLocale::FloatingPointShortest)), qPrintable(tip));
            QCOMPARE(ImportanceHeatmap::formatValue(value).toDouble(), value);  // round-trips exactly
            QVERIFY2(tip.contains(data.rowLabels[r]), qPrintable(tip));
            QVERIFY2(tip.contains(data.columnLabels[c]), qPrintable(tip));
            QVERIFY2(tip.contains(data.unit), qPrintable(tip));
        }
    }
    // Hovering: the plot answers the ToolTip event with the same text.
    const QPoint center = heatmap.cellCenter(2, 1);
    QWidget* target = heatmap.childAt(center);
    QVERIFY(target);
    const QPoint local = target->mapFrom(&heatmap, center);
    QHelpEvent help(QEvent::ToolTip, local, target->mapToGlobal(local));
    QApplication::sendEvent(target, &help);
    QTRY_COMPARE(QToolTip::text(), heatmap.toolTipAt(center));
}

// Regression (GUI probe): the map could be used with the mouse only (Tab skipped it).
void TestImportanceHeatmap::keyboardMovesAndPicks()
{
    ImportanceHeatmap heatmap;
    QVERIFY(heatmap.setScores(sampleMap()));   // 3 rows x 4 columns
    QCOMPARE(heatmap.focusPolicy(), Qt::StrongFocus);
    QSignalSpy clicked(&heatmap, &ImportanceHeatmap::cellClicked);
    QTest::keyClick(&heatmap, Qt::Key_Space);   // nothing outlined yet: the first key outlines the first cell
    QCOMPARE(clicked.count(), 0);
    QCOMPARE(heatmap.selectedRow(), 0);
    QCOMPARE(heatmap.selectedColumn(), 0);
    QTest::keyClick(&heatmap, Qt::Key_Right);
    QTest::keyClick(&heatmap, Qt::Key_Down);
    QTest::keyClick(&heatmap, Qt::Key_Down);
    QTest::keyClick(&heatmap, Qt::Key_Down);   // stops at the last row
    QCOMPARE(heatmap.selectedRow(), 2);
    QCOMPARE(heatmap.selectedColumn(), 1);
    QTest::keyClick(&heatmap, Qt::Key_End);
    QCOMPARE(heatmap.selectedColumn(), 3);
    QTest::keyClick(&heatmap, Qt::Key_Space, Qt::ControlModifier);
    QCOMPARE(clicked.count(), 1);
    QCOMPARE(clicked[0][0].toInt(), 2);
    QCOMPARE(clicked[0][1].toInt(), 3);
    QCOMPARE(clicked[0][2].value<Qt::KeyboardModifiers>(), Qt::KeyboardModifiers(Qt::ControlModifier));
    QTest::keyClick(&heatmap, Qt::Key_Home);
    QTest::keyClick(&heatmap, Qt::Key_Up);
    QTest::keyClick(&heatmap, Qt::Key_Return);
    QCOMPARE(clicked.count(), 2);
    QCOMPARE(clicked[1][0].toInt(), 1);
    QCOMPARE(clicked[1][1].toInt(), 0);
}

void TestImportanceHeatmap::clickEmitsCell()
{
    ImportanceHeatmap heatmap;
    QVERIFY(heatmap.setScores(sampleMap()));
    heatmap.resize(600, 400);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));
    QSignalSpy spy(&heatmap, &ImportanceHeatmap::cellClicked);
    for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 4; ++c) {
            const QPoint center = heatmap.cellCenter(r, c);
            QWidget* target = heatmap.childAt(center);  // the plot widget
            QVERIFY(target);
            QTest::mouseClick(target, Qt::LeftButton, Qt::NoModifier, target->mapFrom(&heatmap, center));
            QCOMPARE(spy.count(), 1);
            const QList<QVariant> args = spy.takeFirst();
            QCOMPARE(args.at(0).toInt(), r);
            QCOMPARE(args.at(1).toInt(), c);
        }
    }
    // Outside the grid and with the right button: nothing.
    QWidget* target = heatmap.childAt(heatmap.cellCenter(0, 0));
    QTest::mouseClick(target, Qt::LeftButton, Qt::NoModifier, QPoint(1, 1));
    QTest::mouseClick(target, Qt::RightButton, Qt::NoModifier, target->mapFrom(&heatmap, heatmap.cellCenter(1, 1)));
    QCOMPARE(spy.count(), 0);
}

void TestImportanceHeatmap::missingValueCell()
{
    HeatmapData data = sampleMap();
    data.values[5] = kNaN;  // row 1, column 1
    ImportanceHeatmap heatmap;
    QVERIFY(heatmap.setScores(data));
    heatmap.resize(600, 400);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));
    int row = -1;
    int column = -1;
    QVERIFY(std::isnan(heatmap.valueAt(heatmap.cellCenter(1, 1), &row, &column)));
    QCOMPARE(row, 1);  // still a cell of the grid
    QCOMPARE(column, 1);
    QVERIFY(heatmap.toolTipAt(heatmap.cellCenter(1, 1)).contains(QStringLiteral("no value")));
    QCOMPARE(heatmap.valueAt(heatmap.cellCenter(1, 2)), data.values[6]);
}

void TestImportanceHeatmap::selectCell()
{
    ImportanceHeatmap heatmap;
    QVERIFY(heatmap.setScores(sampleMap()));
    QCOMPARE(heatmap.selectedRow(), -1);
    heatmap.selectCell(2, 1);
    QCOMPARE(heatmap.selectedRow(), 2);
    QCOMPARE(heatmap.selectedColumn(), 1);
    heatmap.selectCell(3, 0);  // out of range: deselects
    QCOMPARE(heatmap.selectedRow(), -1);
    QCOMPARE(heatmap.selectedColumn(), -1);
    heatmap.selectCell(0, 3);
    QVERIFY(heatmap.setScores(sampleMap()));  // new data clears the selection
    QCOMPARE(heatmap.selectedRow(), -1);
}

void TestImportanceHeatmap::refusesMismatchedSize_data()
{
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("columns");
    QTest::addColumn<int>("values");
    QTest::newRow("one value short") << 3 << 4 << 11;
    QTest::newRow("one value too many") << 3 << 4 << 13;
    QTest::newRow("labels but no values") << 2 << 2 << 0;
    QTest::newRow("values but no labels") << 0 << 0 << 4;
    QTest::newRow("transposed labels") << 4 << 4 << 12;
}

void TestImportanceHeatmap::refusesMismatchedSize()
{
    QFETCH(int, rows);
    QFETCH(int, columns);
    QFETCH(int, values);
    ImportanceHeatmap heatmap;
    const HeatmapData good = sampleMap();
    QVERIFY(heatmap.setScores(good));
    heatmap.resize(600, 400);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));

    HeatmapData bad;
    for (int r = 0; r < rows; ++r)
        bad.rowLabels << QStringLiteral("r%1").arg(r);
    for (int c = 0; c < columns; ++c)
        bad.columnLabels << QStringLiteral("c%1").arg(c);
    bad.values.assign(size_t(values), 42.0);
    QSignalSpy rejected(&heatmap, &ImportanceHeatmap::scoresRejected);
    QVERIFY(!heatmap.setScores(bad));
    QCOMPARE(rejected.count(), 1);
    QVERIFY(!rejected.first().first().toString().isEmpty());
    QCOMPARE(heatmap.rowCount(), 3);
    QCOMPARE(heatmap.columnCount(), 4);
    QCOMPARE(heatmap.scores().values, good.values);
    QCOMPARE(heatmap.valueAt(heatmap.cellCenter(2, 3)), good.values[11]);
}

void TestImportanceHeatmap::emptyAndSingleCell()
{
    ImportanceHeatmap heatmap;
    heatmap.resize(400, 300);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));
    QCOMPARE(heatmap.rowCount(), 0);
    QVERIFY(std::isnan(heatmap.valueAt(QPoint(200, 150))));

    HeatmapData one;
    one.rowLabels = {QStringLiteral("only row")};
    one.columnLabels = {QStringLiteral("only column")};
    one.values = {3.25};
    QVERIFY(heatmap.setScores(one));
    QCOMPARE(heatmap.valueAt(heatmap.cellCenter(0, 0)), 3.25);
    QVERIFY(heatmap.colorScaleShown());

    // Regression (GUI probe): a map one row (or one column) high drew no cell at all, only its axes: a one-block
    // model's maps were blank. Each cell is painted in its own colour now.
    for (bool oneRow : {true, false}) {
        HeatmapData line;
        const QStringList three = {QStringLiteral("a"), QStringLiteral("b"), QStringLiteral("c")};
        line.rowLabels = oneRow ? QStringList{QStringLiteral("block 0")} : three;
        line.columnLabels = oneRow ? three : QStringList{QStringLiteral("q_proj")};
        line.values = {0.0, 0.5, 1.0};
        QVERIFY(heatmap.setScores(line));
        // The distinct colours at the three cells' centres, none of them the plot's background (the plot replots queued).
        const auto paintedCells = [&] {
            const QImage image = heatmap.grab().toImage();
            const QColor background = image.pixelColor(1, 1);
            QSet<QRgb> colours;
            for (int i = 0; i < 3; ++i) {
                const QColor painted = image.pixelColor(oneRow ? heatmap.cellCenter(0, i) : heatmap.cellCenter(i, 0));
                if (painted != background) colours.insert(painted.rgb());
            }
            return colours.size();
        };
        QTRY_COMPARE(paintedCells(), 3);
        for (int i = 0; i < 3; ++i)
            QCOMPARE(heatmap.valueAt(oneRow ? heatmap.cellCenter(0, i) : heatmap.cellCenter(i, 0)), line.values[size_t(i)]);
    }

    heatmap.clear();
    QCOMPARE(heatmap.rowCount(), 0);
    QCOMPARE(heatmap.columnCount(), 0);
    QVERIFY(!heatmap.colorScaleShown());   // regression (GUI probe): the last map's range stayed on show
    QVERIFY(std::isnan(heatmap.valueAt(QPoint(200, 150))));
}

void TestImportanceHeatmap::followsPalette()
{
    ImportanceHeatmap heatmap;
    QVERIFY(heatmap.setScores(sampleMap()));
    heatmap.resize(600, 400);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));

    QPalette dark = heatmap.palette();
    dark.setColor(QPalette::Base, QColor(30, 30, 30));
    dark.setColor(QPalette::Window, QColor(40, 40, 40));
    dark.setColor(QPalette::WindowText, QColor(230, 230, 230));
    heatmap.setPalette(dark);
    // The plot background (top-left pixel, outside axes and text) takes the palette's Base colour.
    QTRY_COMPARE(heatmap.grab().toImage().pixelColor(0, 0), QColor(30, 30, 30));
}

QTEST_MAIN(TestImportanceHeatmap)
#include "test_importance_heatmap.moc"
