#include "app/gui/model_tree_view.h"

#include <QHeaderView>
#include <QPainter>
#include <QScrollBar>

#include <map>
#include <regex>
#include <set>

#include "app/gui/layer_state.h"
#include "core/io/ggml_types.h"
#include "core/model/compressed_linear.h"
#include "core/model/model.h"
#include "core/model/model_info.h"

namespace cwb {

namespace {

QString shapeText(const std::vector<int64_t>& shape) {
    QStringList parts;
    for (int64_t d : shape) parts << QString::number(d);
    return parts.join(QStringLiteral(" × "));
}

QTreeWidgetItem* groupItem(QTreeWidgetItem* parent, const QString& name, const QString& key) {
    for (int i = 0; i < parent->childCount(); ++i)
        if (parent->child(i)->text(ModelTreeView::NameColumn) == name) return parent->child(i);
    auto* item = new QTreeWidgetItem(parent, {name});
    item->setData(ModelTreeView::NameColumn, ModelTreeView::LayerRole, key);
    return item;
}

// Sums parameters and bytes of a group from its children.
void fillTotals(QTreeWidgetItem* item) {
    if (item->childCount() == 0) return;
    qint64 params = 0, bytes = 0;
    for (int i = 0; i < item->childCount(); ++i) {
        QTreeWidgetItem* child = item->child(i);
        fillTotals(child);
        params += child->data(ModelTreeView::ParametersColumn, Qt::UserRole).toLongLong();
        bytes += child->data(ModelTreeView::BytesColumn, Qt::UserRole).toLongLong();
    }
    item->setData(ModelTreeView::ParametersColumn, Qt::UserRole, params);
    item->setData(ModelTreeView::BytesColumn, Qt::UserRole, bytes);
    item->setText(ModelTreeView::ParametersColumn, QLocale().toString(params));
    item->setText(ModelTreeView::BytesColumn, QString::fromStdString(humanBytes(double(bytes))));
}

} // namespace

ModelTreeView::ModelTreeView(QWidget* parent) : QTreeWidget(parent) {
    setColumnCount(ColumnCount);
    setHeaderLabels({tr("Name"), tr("Shape"), tr("Type"), tr("Parameters"), tr("Bytes"), tr("Variant")});
    setUniformRowHeights(true);
    setAlternatingRowColors(true);
    header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    header()->setStretchLastSection(true);
    connect(this, &QTreeWidget::itemSelectionChanged, this, [this] {
        const QString layer = selectedLayer();
        if (!layer.isEmpty()) emit layerSelected(layer);
    });
    header()->setVisible(false);   // until a model is set
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
}

void ModelTreeView::setModel(const Model* model) {
    mModel = model;
    // Column headers over an empty tree beside the welcome page read as a broken view (GUI probe).
    header()->setVisible(mModel != nullptr);
    // Empty, the columns' width still gave a scrollbar, and where it was left the next model opened scrolled sideways.
    setHorizontalScrollBarPolicy(mModel ? Qt::ScrollBarAsNeeded : Qt::ScrollBarAlwaysOff);
    rebuild();
    horizontalScrollBar()->setValue(0);
    viewport()->update();
}

QString ModelTreeView::placeholderText() const {
    return mModel ? QString() : tr("No model open.\n\nThe modules of an opened model or project are listed here.");
}

void ModelTreeView::paintEvent(QPaintEvent* event) {
    QTreeWidget::paintEvent(event);
    const QString text = placeholderText();
    if (text.isEmpty()) return;
    QPainter painter(viewport());
    painter.setPen(palette().color(QPalette::Disabled, QPalette::Text));
    const int margin = fontMetrics().height();
    painter.drawText(viewport()->rect().adjusted(margin, margin, -margin, -margin),
                     Qt::AlignHCenter | Qt::AlignTop | Qt::TextWordWrap, text);
}

void ModelTreeView::setSteps(const nlohmann::json& steps) {
    mSteps = steps;
    if (!mModel) return;
    auto states = layerStates(*mModel, mSteps);
    // A head tied to the embedding has no row of its own: what a step does to it (a quantized copy) shows on the
    // embedding's row.
    const auto head = states.find(names::kHead);
    if (head != states.end() && !mModel->has("lm_head.weight")) {
        states[names::embedding(mModel->spec.family)] = "output head (tied): " + head->second + " on a copy; the embedding stays";
    }
    for (QTreeWidgetItemIterator it(this); *it; ++it) {
        const auto found = states.find((*it)->data(NameColumn, LayerRole).toString().toStdString());
        (*it)->setText(StateColumn, found == states.end() ? QString() : QString::fromStdString(found->second));
    }
}

void ModelTreeView::rebuild() {
    clear();
    if (!mModel) return;
    setUpdatesEnabled(false);
    // "model.layers.3.self_attn.q_proj" -> block prefix "model.layers.3", sublayer "self_attn", rest "q_proj".
    static const std::regex blockPattern(R"(^(.*?\.(\d+))\.([^.]+)\.(.+)$)");
    static const std::regex blockTensorPattern(R"(^(.*?\.(\d+))\.([^.]+)$)");
    auto* root = new QTreeWidgetItem(this, {QString::fromStdString(mModel->spec.modelType + " (" + mModel->format + ")")});
    std::map<int, QTreeWidgetItem*> blocks;
    std::set<std::string> linear;
    for (const auto& l : mModel->linearLayers()) linear.insert(l);
    if (mModel->has("lm_head.weight")) linear.insert(names::kHead);   // the head's row carries what steps do to it
    auto* other = new QTreeWidgetItem({tr("Other tensors")});
    for (const auto& name : mModel->tensorNames()) {
        const TensorRecord& t = mModel->tensor(name);
        std::string layer = name;
        if (layer.size() > 7 && layer.compare(layer.size() - 7, 7, ".weight") == 0) layer.resize(layer.size() - 7);
        std::smatch m;
        QTreeWidgetItem* parent = other;
        QString label = QString::fromStdString(name);
        const bool inSublayer = std::regex_match(layer, m, blockPattern);
        std::smatch direct;
        if (inSublayer || std::regex_match(layer, direct, blockTensorPattern)) {
            const std::smatch& b = inSublayer ? m : direct;
            const int block = std::stoi(b[2]);
            auto& blockItem = blocks[block];
            if (!blockItem) {
                blockItem = new QTreeWidgetItem({tr("block %1").arg(block)});
                blockItem->setData(NameColumn, LayerRole, QString::fromStdString(b[1].str()));
            }
            parent = blockItem;
            label = QString::fromStdString(name.substr(b[1].length() + 1));
            if (inSublayer) {
                parent = groupItem(blockItem, QString::fromStdString(m[3].str()), QString::fromStdString(m[1].str() + "." + m[3].str()));
                label = QString::fromStdString(name.substr(m[1].length() + m[3].length() + 2));
                if (linear.count(layer)) label = QString::fromStdString(m[4].str());
            }
        }
        auto* item = new QTreeWidgetItem(parent, {label});
        const bool isLinear = linear.count(layer) > 0;
        item->setData(NameColumn, LayerRole, QString::fromStdString(isLinear ? layer : name));
        item->setText(ShapeColumn, shapeText(t.shape));
        // A compressed layer shows what it is stored as (packed levels, FP8 codes), not its weight record.
        const auto packed = name != layer ? mModel->compressed(layer) : nullptr;
        // A tensor of a quantized GGUF source that a step replaced is counted in the type an export writes it in.
        const ggml::TypeTraits* traits = ggml::traits(t.storedType());
        const qint64 bytes = packed ? qint64(packed->storageBytes()) : qint64(t.storedBytes());
        item->setText(TypeColumn, packed ? QString::fromStdString(packed->describe())
                                         : traits ? QString::fromLatin1(traits->name) : tr("unknown"));
        item->setData(ParametersColumn, Qt::UserRole, qint64(t.elementCount()));
        item->setText(ParametersColumn, QLocale().toString(qint64(t.elementCount())));
        item->setData(BytesColumn, Qt::UserRole, bytes);
        item->setText(BytesColumn, QString::fromStdString(humanBytes(double(bytes))));
        item->setToolTip(NameColumn, QString::fromStdString(name));
    }
    for (auto& [index, item] : blocks) root->addChild(item);
    if (other->childCount()) root->addChild(other);
    else delete other;
    fillTotals(root);
    root->setExpanded(true);
    setUpdatesEnabled(true);
    setSteps(mSteps);
}

QTreeWidgetItem* ModelTreeView::itemForLayer(const QString& layer) const {
    for (QTreeWidgetItemIterator it(const_cast<ModelTreeView*>(this)); *it; ++it)
        if ((*it)->data(NameColumn, LayerRole).toString() == layer) return *it;
    return nullptr;
}

bool ModelTreeView::selectLayer(const QString& layer) {
    QTreeWidgetItem* item = itemForLayer(layer);
    if (!item) return false;
    setCurrentItem(item);
    scrollToItem(item);
    return true;
}

QString ModelTreeView::selectedLayer() const {
    const auto items = selectedItems();
    return items.isEmpty() ? QString() : items.front()->data(NameColumn, LayerRole).toString();
}

} // namespace cwb
