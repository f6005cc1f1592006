#include "app/gui/param_form.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QSpinBox>

#include <climits>
#include <cmath>

namespace cwb {

ParamForm::ParamForm(QWidget* parent) : QWidget(parent), mLayout(new QFormLayout(this)) {
    mLayout->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
}

QWidget* ParamForm::editor(const std::string& name) const {
    const auto it = mEditors.find(name);
    return it == mEditors.end() ? nullptr : it->second;
}

void ParamForm::report(const std::string& name, const nlohmann::json& value) {
    emit parameterEdited(QString::fromStdString(name), QString::fromStdString(value.dump()));
}

QWidget* ParamForm::makeEditor(const ParamSpec& spec) {
    const std::string name = spec.name;
    switch (spec.type) {
    case ParamType::Int: {
        auto* box = new QSpinBox(this);
        box->setRange(static_cast<int>(std::max<double>(spec.minimum, INT_MIN)), static_cast<int>(std::min<double>(spec.maximum, INT_MAX)));
        box->setKeyboardTracking(false);
        connect(box, &QSpinBox::valueChanged, this, [this, name](int v) { report(name, v); });
        return box;
    }
    case ParamType::Float: {
        auto* box = new QDoubleSpinBox(this);
        box->setDecimals(4);
        box->setRange(spec.minimum, spec.maximum);
        box->setSingleStep(spec.maximum - spec.minimum > 10 ? 1.0 : 0.01);
        box->setKeyboardTracking(false);
        connect(box, &QDoubleSpinBox::valueChanged, this, [this, name](double v) { report(name, v); });
        return box;
    }
    case ParamType::Bool: {
        auto* check = new QCheckBox(this);
        connect(check, &QCheckBox::toggled, this, [this, name](bool v) { report(name, v); });
        return check;
    }
    case ParamType::Choice: {
        auto* combo = new QComboBox(this);
        for (const auto& c : spec.choices) combo->addItem(QString::fromStdString(c));
        connect(combo, &QComboBox::currentTextChanged, this, [this, name](const QString& v) { report(name, v.toStdString()); });
        return combo;
    }
    case ParamType::Text: {
        auto* line = new QLineEdit(this);
        connect(line, &QLineEdit::editingFinished, this, [this, name, line] { report(name, line->text().toStdString()); });
        return line;
    }
    }
    return new QLabel(this);
}

void ParamForm::showValue(const ParamSpec& spec, QWidget* editor, const nlohmann::json& given) {
    const nlohmann::json& value = given.is_null() ? spec.defaultValue : given;
    const QSignalBlocker block(editor);
    try {
        if (auto* box = qobject_cast<QSpinBox*>(editor)) box->setValue(value.get<int>());
        else if (auto* dbox = qobject_cast<QDoubleSpinBox*>(editor)) dbox->setValue(value.get<double>());
        else if (auto* check = qobject_cast<QCheckBox*>(editor)) check->setChecked(value.get<bool>());
        else if (auto* combo = qobject_cast<QComboBox*>(editor)) combo->setCurrentText(QString::fromStdString(value.get<std::string>()));
        else if (auto* line = qobject_cast<QLineEdit*>(editor)) line->setText(QString::fromStdString(value.get<std::string>()));
    } catch (const nlohmann::json::exception&) {
        editor->setToolTip(tr("stored value %1 has the wrong type; showing nothing").arg(QString::fromStdString(value.dump())));
    }
}

void ParamForm::setSpecs(const std::vector<ParamSpec>& specs, const nlohmann::json& values) {
    while (mLayout->rowCount() > 0) mLayout->removeRow(0);
    mEditors.clear();
    mSpecs = specs;
    for (const auto& spec : specs) {
        QWidget* editor = makeEditor(spec);
        editor->setObjectName(QString::fromStdString(spec.name));
        QString help = QString::fromStdString(spec.help);
        if (spec.type == ParamType::Int || spec.type == ParamType::Float)
            help += tr("\nrange %1 … %2, default %3").arg(spec.minimum).arg(spec.maximum).arg(QString::fromStdString(spec.defaultValue.dump()));
        editor->setToolTip(help);
        auto* label = new QLabel(QString::fromStdString(spec.name), this);
        label->setToolTip(help);
        mLayout->addRow(label, editor);
        mEditors[spec.name] = editor;
    }
    setValues(values);
}

void ParamForm::setValues(const nlohmann::json& values) {
    for (const auto& spec : mSpecs) {
        const nlohmann::json value = values.is_object() && values.contains(spec.name) ? values[spec.name] : nlohmann::json();
        showValue(spec, mEditors[spec.name], value);
    }
}

} // namespace cwb
