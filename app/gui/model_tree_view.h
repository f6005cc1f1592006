#pragma once
// The model as a tree: blocks -> attention / MLP -> linear layers, with shape, type, parameters, bytes and
// what the current variant's recipe does to each layer. Other tensors (embeddings, norms, head) are listed
// under "Other tensors".
#include <QTreeWidget>

#include <nlohmann/json.hpp>

namespace cwb {

class Model;

class ModelTreeView : public QTreeWidget {
    Q_OBJECT
public:
    enum Column { NameColumn, ShapeColumn, TypeColumn, ParametersColumn, BytesColumn, StateColumn, ColumnCount };
    static constexpr int LayerRole = Qt::UserRole + 1;   // the full layer or tensor name

    explicit ModelTreeView(QWidget* parent = nullptr);

    void setModel(const Model* model);   // nullptr clears
    const Model* model() const { return mModel; }
    void setSteps(const nlohmann::json& steps);   // the current variant's recipe steps
    // Selects and reveals the item of `layer` (a linear layer, a block prefix, or a tensor). False if absent.
    bool selectLayer(const QString& layer);
    QString selectedLayer() const;
    QTreeWidgetItem* itemForLayer(const QString& layer) const;
    // What the empty view says in place of the column headers while no model is open ("" with a model).
    QString placeholderText() const;

signals:
    void layerSelected(const QString& layer);

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    void rebuild();
    const Model* mModel = nullptr;
    nlohmann::json mSteps = nlohmann::json::array();
};

} // namespace cwb
