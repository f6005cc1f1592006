#pragma once
// Plain data shown by ImportanceHeatmap (no Qt widgets, no plotting library).

#include <QString>
#include <QStringList>

#include <vector>

namespace cwb {

// A rows × columns grid of scores, e.g. layers × tensors of an importance or error measure.
struct HeatmapData {
    QString title;
    QStringList rowLabels;     // one per row, top to bottom
    QStringList columnLabels;  // one per column, left to right
    std::vector<double> values;  // rows × columns, row-major; NaN = no value (drawn transparent)
    QString unit;              // shown on the colour scale and in tooltips; may be empty
};

}  // namespace cwb
