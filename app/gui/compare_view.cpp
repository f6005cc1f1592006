#include "app/gui/compare_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <map>
#include <set>

#include "app/gui/project_document.h"
#include "core/model/model_info.h"
#include "widgets/ab_chart.h"

namespace cwb {

namespace {

struct MetricSpec {
    const char* id;
    const char* title;
    const char* unit;
    bool withBase;   // KL and top-1 compare a variant with the base, so the base has no bar
};

const MetricSpec kMetrics[] = {{"perplexity", "Perplexity", "", true},
                               {"kl_mean", "KL divergence to the base (mean)", "nats", false},
                               {"top1", "Top-1 agreement with the base", "fraction", false},
                               {"bytes", "Model size", "bytes", true},
                               {"bits_per_weight", "Bits per weight (linear layers)", "bits", true}};

} // namespace

CompareView::CompareView(QWidget* parent)
    : QWidget(parent), mMetric(new QComboBox(this)), mChart(new AbChart(this)), mTable(new QTableWidget(this)) {
    for (const auto& m : kMetrics) mMetric->addItem(tr(m.title), QString::fromLatin1(m.id));
    auto* row = new QHBoxLayout;
    row->addWidget(new QLabel(tr("Metric:"), this));
    row->addWidget(mMetric, 1);
    mTable->setEditTriggers(QAbstractItemView::NoEditTriggers);
    mTable->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->addWidget(mChart);
    splitter->addWidget(mTable);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 1);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(row);
    layout->addWidget(splitter, 1);
    connect(mMetric, &QComboBox::currentIndexChanged, this, &CompareView::refresh);
    setDocument(nullptr);
}

void CompareView::setDocument(ProjectDocument* document) {
    if (mDocument) disconnect(mDocument, nullptr, this, nullptr);
    mDocument = document;
    if (document) {
        connect(document, &ProjectDocument::resultsChanged, this, &CompareView::refresh);
        connect(document, &ProjectDocument::variantsChanged, this, &CompareView::refresh);
    }
    refresh();
}

void CompareView::setMetric(const QString& metric) {
    const int index = mMetric->findData(metric);
    if (index >= 0) mMetric->setCurrentIndex(index);
}

QString CompareView::metric() const { return mMetric->currentData().toString(); }

void CompareView::refresh() {
    mChart->clear();
    mTable->clear();
    mTable->setRowCount(0);
    mTable->setColumnCount(0);
    if (!mDocument) return;
    const Project& project = mDocument->project();
    std::vector<std::string> names{Project::kBaseName};
    for (const auto& v : project.variants()) names.push_back(v.name);

    const MetricSpec* spec = &kMetrics[0];
    for (const auto& m : kMetrics)
        if (metric() == m.id) spec = &m;
    std::vector<AbSeries> series;
    std::vector<std::string> metrics;   // table columns, in first-seen order
    std::map<std::pair<std::string, std::string>, ResultRow> cells;
    for (const auto& name : names) {
        for (const auto& r : project.results(name)) {
            if (std::find(metrics.begin(), metrics.end(), r.metric) == metrics.end()) metrics.push_back(r.metric);
            cells[{name, r.metric}] = r;
            if (r.metric == spec->id && (spec->withBase || name != Project::kBaseName))
                series.push_back({QString::fromStdString(name), r.value, r.error});
        }
    }
    if (!series.empty()) mChart->setMetric(tr(spec->title), QString::fromLatin1(spec->unit), series);

    QStringList columns;
    for (const auto& m : metrics) columns << QString::fromStdString(m);
    mTable->setColumnCount(columns.size());
    mTable->setHorizontalHeaderLabels(columns);
    QStringList rows;
    for (const auto& name : names) {
        if (project.results(name).empty()) continue;
        const int row = mTable->rowCount();
        mTable->insertRow(row);
        rows << QString::fromStdString(name);
        for (int c = 0; c < columns.size(); ++c) {
            const auto it = cells.find({name, metrics[size_t(c)]});
            if (it == cells.end()) continue;
            QString text = metrics[size_t(c)] == "bytes" ? QString::fromStdString(humanBytes(it->second.value))
                                                         : QString::number(it->second.value, 'g', 6);
            if (it->second.error > 0) text += QStringLiteral(" ± %1").arg(it->second.error, 0, 'g', 3);
            auto* item = new QTableWidgetItem(text);
            item->setToolTip(tr("%1 on %2, %3 threads, %4").arg(QString::fromStdString(it->second.device)).arg(it->second.threads)
                                 .arg(QString::fromStdString(it->second.time)));
            mTable->setItem(row, c, item);
        }
    }
    mTable->setVerticalHeaderLabels(rows);
}

} // namespace cwb
