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
    void labelsFitTheirSpace();
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
            QVERIFY2(tip.contains(ImportanceHeatmap::formatValue(value)), qPrintable(tip));
            // Four significant digits (17 were shown: GUI probe), within half a unit of the last.
            const QString shown = ImportanceHeatmap::formatValue(value);
            QVERIFY2(std::abs(shown.toDouble() - value) <= 5e-4 * std::abs(value), qPrintable(shown));
            QVERIFY2(QString(shown).remove('-').remove('.').remove(QRegularExpression("^0+")).remove(QRegularExpression("e.*$")).size() <= 4,
                     qPrintable(shown));
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

// Tick labels: all of them where they fit, flat where they fit flat; every step-th where they would overlap (a
// channel map's hundreds of columns were one black smear, GUI probe); a turned last label stays left of the colour
// scale (it ran under it).
void TestImportanceHeatmap::labelsFitTheirSpace()
{
    auto grid = [](int rows, const QStringList& columns) {
        HeatmapData data;
        data.unit = QStringLiteral("nats");
        for (int r = 0; r < rows; ++r)
            data.rowLabels << QStringLiteral("block %1").arg(r);
        data.columnLabels = columns;
        for (int i = 0; i < rows * int(columns.size()); ++i)
            data.values.push_back(0.01 * (i % 17));
        return data;
    };
    const QStringList layers = {QStringLiteral("q_proj"), QStringLiteral("k_proj"), QStringLiteral("v_proj"),
                                QStringLiteral("o_proj"), QStringLiteral("gate_proj"), QStringLiteral("up_proj"),
                                QStringLiteral("down_proj")};
    ImportanceHeatmap heatmap;
    QVERIFY(heatmap.setScores(grid(8, layers)));
    heatmap.resize(700, 450);
    heatmap.show();
    QVERIFY(QTest::qWaitForWindowExposed(&heatmap));
    QCOMPARE(heatmap.shownColumnLabels(), layers);
    QVERIFY(!heatmap.columnLabelsTurned());
    QCOMPARE(heatmap.shownRowLabels().size(), 8);

    // Narrow: turned, all shown, the last one's far end left of the colour scale.
    const QStringList longNames = {QStringLiteral("self_attn.q_proj"), QStringLiteral("self_attn.k_proj"),
                                   QStringLiteral("self_attn.v_proj"), QStringLiteral("self_attn.o_proj"),
                                   QStringLiteral("mlp.gate_proj"), QStringLiteral("mlp.up_proj"),
                                   QStringLiteral("mlp.down_proj.weight")};
    QVERIFY(heatmap.setScores(grid(8, longNames)));
    heatmap.resize(420, 300);
    QTRY_VERIFY(heatmap.columnLabelsTurned());
    QCOMPARE(heatmap.shownColumnLabels(), longNames);
    const QFontMetrics metrics(heatmap.font());
    const int lastTick = heatmap.cellCenter(0, 6).x();
    const int reach = int(std::ceil(metrics.horizontalAdvance(longNames.last()) * std::sqrt(0.5)));
    QVERIFY(!heatmap.colorScaleRect().isEmpty());
    QVERIFY2(lastTick + reach <= heatmap.colorScaleRect().left(),
             qPrintable(QStringLiteral("last label ends at %1, the colour scale starts at %2")
                            .arg(lastTick + reach).arg(heatmap.colorScaleRect().left())));

    // 300 channels in 700 px: every step-th label, flat numbers a label's width apart, every cell still reachable.
    QStringList channels;
    for (int i = 0; i < 300; ++i)
        channels << QString::number(i);
    QVERIFY(heatmap.setScores(grid(8, channels)));
    heatmap.resize(700, 450);
    QTRY_COMPARE(heatmap.width(), 700);
    const QStringList shown = heatmap.shownColumnLabels();
    QVERIFY2(shown.size() > 5 && shown.size() < 100, qPrintable(QString::number(shown.size())));
    const int step = shown.at(1).toInt();
    QCOMPARE(shown.first(), QStringLiteral("0"));
    const int pitch = heatmap.cellCenter(0, step).x() - heatmap.cellCenter(0, 0).x();
    if (heatmap.columnLabelsTurned())
        QVERIFY(pitch * std::sqrt(0.5) >= metrics.height());
    else
        QVERIFY2(pitch >= metrics.horizontalAdvance(QStringLiteral("299")),
                 qPrintable(QStringLiteral("labels %1 px apart").arg(pitch)));
    int row = -1;
    int column = -1;
    heatmap.valueAt(heatmap.cellCenter(3, 299), &row, &column);
    QCOMPARE(row, 3);
    QCOMPARE(column, 299);

    // 80 blocks: thinned rows in a short widget, all of them again once it is tall enough.
    QVERIFY(heatmap.setScores(grid(80, layers)));
    QVERIFY(heatmap.shownRowLabels().size() < 80);
    QCOMPARE(heatmap.shownRowLabels().first(), QStringLiteral("block 0"));
    heatmap.resize(700, 2400);
    QTRY_COMPARE(heatmap.shownRowLabels().size(), 80);
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
