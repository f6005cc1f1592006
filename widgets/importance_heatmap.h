#pragma once
// ImportanceHeatmap: a rows × columns grid of scores (e.g. layers × tensors) with a colour scale,
// hover tooltips and cell selection. QCustomPlot stays behind the pimpl (STYLE.md §10).

#include "widgets/heatmap_data.h"

#include <QPoint>
#include <QString>
#include <QRect>
#include <QVector>
#include <QWidget>

#include <memory>

namespace cwb {

class ImportanceHeatmap : public QWidget {
    Q_OBJECT
public:
    explicit ImportanceHeatmap(QWidget* parent = nullptr);
    ~ImportanceHeatmap() override;

    // Shows `data`. Refuses it (returns false, emits scoresRejected, keeps the previous map) when
    // values.size() != rowLabels.size() × columnLabels.size(). An empty map (0 rows or 0 columns,
    // no values) is accepted and clears the plot. Clears the selection.
    bool setScores(const HeatmapData& data);
    const HeatmapData& scores() const;
    void clear();

    int rowCount() const;
    bool colorScaleShown() const;   // only beside a map: without one it showed a stale range
    int columnCount() const;
    // Value of a cell, NaN when out of range or when the cell has no value.
    double value(int row, int column) const;

    // Maps a position in this widget's coordinates to the cell under it (through the plot's axis
    // transforms). Returns the cell's value (NaN for a cell without value) and sets *row/*column;
    // outside the grid returns NaN and sets them to -1. Either pointer may be null.
    double valueAt(const QPoint& widgetPos, int* row = nullptr, int* column = nullptr) const;
    // Centre of a cell in this widget's coordinates; (-1, -1) for an invalid cell.
    QPoint cellCenter(int row, int column) const;
    // Tooltip shown when hovering `widgetPos`: "<row label> · <column label>\n<value> <unit>"
    // with the value to four significant digits (formatValue); empty outside the grid.
    QString toolTipAt(const QPoint& widgetPos) const;
    // The value formatting used in tooltips: four significant digits, "no value" for NaN.
    static QString formatValue(double value);

    // The tick labels as drawn at the current size: every step-th where all would overlap (every cell's labels are in
    // its tooltip), column labels turned 45° where that shows more of them.
    QStringList shownColumnLabels() const;
    QStringList shownRowLabels() const;
    bool columnLabelsTurned() const;
    // Widget coordinates of the colour scale's bar (the labels must stay left of it); empty when it is hidden.
    QRect colorScaleRect() const;

    // Outlines a cell (a rectangle item); an invalid cell (e.g. -1, -1) removes the outline.
    void selectCell(int row, int column);
    int selectedRow() const;     // -1 when nothing is selected
    int selectedColumn() const;  // -1 when nothing is selected
    // Outlines groups of cells, each a rectangle of whole cells (x: column, y: row), thinner than the selection: the
    // layers picked on the map (they had no mark on it). An empty list removes them; setScores keeps them.
    void setMarkedCells(const QVector<QRect>& cells);
    int markedCount() const;

signals:
    // A left click (press and release on the same cell), with the keyboard modifiers of the release.
    void cellClicked(int row, int column, Qt::KeyboardModifiers modifiers);
    // The cell under the mouse changed (-1, -1 when leaving the grid).
    void cellHovered(int row, int column);
    // setScores refused its input; `reason` is a one-line English message.
    void scoresRejected(const QString& reason);

protected:
    // Keyboard use: the arrows (Home/End, Page Up/Down by 10 columns) move the outlined cell and show its value;
    // Space or Enter acts as a click on it, with the same modifiers (the map could be used with the mouse only).
    void keyPressEvent(QKeyEvent* event) override;
    void changeEvent(QEvent* event) override;
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    struct Private;
    std::unique_ptr<Private> m;
};

}  // namespace cwb
