#include "app/gui/param_form.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QRegularExpression>
#include <QSpinBox>
#include <QWheelEvent>

#include <algorithm>
#include <climits>
#include <cmath>

namespace cwb {

namespace {

// Spin boxes and combos in a scrolled form change only when focused: a wheel over one passes on to the scroll area
// (editing values by scrolling past them pushed undo steps nobody meant).
template <class Base>
class FocusedWheel : public Base {
public:
    using Base::Base;

protected:
    void wheelEvent(QWheelEvent* event) override {
        if (!this->hasFocus()) event->ignore();
        else Base::wheelEvent(event);
    }
};

// Floats as typed, in plain or scientific notation, to full precision (4 fixed decimals showed 2e-5 as 0.0000 and
// refused typing it); the arrows step by the value's leading digit below 0.1 (1e-3 → 2e-3, 1e-3 → 9e-4).
class FloatBox : public FocusedWheel<QDoubleSpinBox> {
public:
    explicit FloatBox(QWidget* parent) : FocusedWheel<QDoubleSpinBox>(parent) { setDecimals(17); }

    QString textFromValue(double value) const override { return QString::number(value, 'g', 8); }
    double valueFromText(const QString& text) const override { return text.trimmed().toDouble(); }
    QValidator::State validate(QString& text, int&) const override {
        static const QRegularExpression partial(QStringLiteral("^\\s*[+-]?(\\d*\\.?\\d*)([eE][+-]?\\d*)?\\s*$"));
        if (!partial.match(text).hasMatch()) return QValidator::Invalid;
        bool ok = false;
        const double v = text.trimmed().toDouble(&ok);
        return ok && v >= minimum() && v <= maximum() ? QValidator::Acceptable : QValidator::Intermediate;
    }
    void stepBy(int steps) override {
        if (value() == 0 || std::abs(value()) >= 0.1) return QDoubleSpinBox::stepBy(steps);
        for (int i = 0; i < std::abs(steps); ++i) {
            const double v = value();
            double digit = std::pow(10.0, std::floor(std::log10(std::abs(v)) + 1e-9));
            if (steps < 0 && std::abs(std::abs(v) - digit) <= digit * 1e-9) digit /= 10;
            setValue(v + (steps > 0 ? digit : -digit));
        }
    }
};

// Whole numbers in the range but for the values a method refuses (GPTQ's group_size 0): those are not accepted as
// typed, and the arrows step over them. The form once took 0 and the run refused it later (GUI probe).
class IntBox : public FocusedWheel<QSpinBox> {
public:
    IntBox(QWidget* parent, std::vector<int64_t> excluded) : FocusedWheel<QSpinBox>(parent), mExcluded(std::move(excluded)) {}

    QValidator::State validate(QString& text, int& position) const override {
        const QValidator::State state = QSpinBox::validate(text, position);
        if (state == QValidator::Acceptable && isExcluded(valueFromText(text))) return QValidator::Intermediate;
        return state;
    }
    void fixup(QString& text) const override {
        if (isExcluded(valueFromText(text))) text = textFromValue(value());   // back to the last accepted value
    }
    void stepBy(int steps) override {
        // To the next allowed value directly: stepping through a refused one emitted it (an edit of 0) on the way.
        int64_t target = value();
        const int64_t direction = steps > 0 ? 1 : -1;
        for (int i = 0; i < std::abs(steps); ++i) {
            int64_t next = target + direction * singleStep();
            while (next >= minimum() && next <= maximum() && isExcluded(next)) next += direction;
            if (next < minimum() || next > maximum()) break;
            target = next;
        }
        setValue(int(target));
    }

private:
    bool isExcluded(int64_t v) const { return std::find(mExcluded.begin(), mExcluded.end(), v) != mExcluded.end(); }
    std::vector<int64_t> mExcluded;
};

} // namespace

ParamForm::ParamForm(QWidget* parent) : QWidget(parent), mLayout(new QFormLayout(this)) {
    mLayout->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
}

QWidget* ParamForm::editor(const std::string& name) const {
    const auto it = mEditors.find(name);
    return it == mEditors.end() ? nullptr : it->second;
}

QList<QWidget*> ParamForm::editorsInOrder() const {
    QList<QWidget*> out;
    for (const auto& spec : mSpecs)
        if (QWidget* w = editor(spec.name)) out << w;
    return out;
}

void ParamForm::report(const std::string& name, const nlohmann::json& value) {
    emit parameterEdited(QString::fromStdString(name), QString::fromStdString(value.dump()));
    // The value is now the project's: the field's own undo covers only typing not yet applied, so that Ctrl+Z next
    // undoes the edit in the project (the field undid its text alone, and the step list kept the value, GUI probe).
    if (QWidget* field = editor(name)) forgetTyping(field);
}

void ParamForm::forgetTyping(QWidget* field) {
    auto* line = qobject_cast<QLineEdit*>(field);
    if (!line) line = field->findChild<QLineEdit*>();   // a spin box's own line edit
    if (!line || (!line->isUndoAvailable() && !line->isRedoAvailable())) return;
    const QSignalBlocker block(line);   // the same text: nothing to tell the spin box
    const int cursor = line->cursorPosition();
    line->setText(line->text());        // setText clears the undo history
    line->setCursorPosition(cursor);
}

QWidget* ParamForm::makeEditor(const ParamSpec& spec) {
    const std::string name = spec.name;
    switch (spec.type) {
    case ParamType::Int: {
        auto* box = new IntBox(this, spec.excluded);
        box->setFocusPolicy(Qt::StrongFocus);
        box->setRange(static_cast<int>(std::max<double>(spec.minimum, INT_MIN)), static_cast<int>(std::min<double>(spec.maximum, INT_MAX)));
        box->setKeyboardTracking(false);
        connect(box, &QSpinBox::valueChanged, this, [this, name](int v) { report(name, v); });
        return box;
    }
    case ParamType::Float: {
        auto* box = new FloatBox(this);
        box->setFocusPolicy(Qt::StrongFocus);
        box->setRange(spec.minimum, spec.maximum);
        // The width Qt derives from a 0…1 range cut "0.01" to "0.(" (GUI probe): room for 8 significant digits.
        box->setMinimumWidth(box->fontMetrics().horizontalAdvance(QStringLiteral("-0.00012345678")) + 40);
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
        auto* combo = new FocusedWheel<QComboBox>(this);
        combo->setFocusPolicy(Qt::StrongFocus);
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
        for (size_t i = 0; i < spec.excluded.size(); ++i)
            help += (i ? QStringLiteral(", ") : tr("; not allowed: ")) + QString::number(spec.excluded[i]);
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
