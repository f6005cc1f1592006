#pragma once
// A form generated from a method's ParamSpec declarations: a spin box per Int/Float (the declared range is
// the widget's range, so out-of-range values cannot be entered), a check box per Bool, a combo box per
// Choice, a line edit per Text; each declaration's help is the widget's tooltip. Edits are reported through
// parameterEdited; the form never changes the project itself.
#include <QWidget>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/compress/params.h"

class QFormLayout;

namespace cwb {

class ParamForm : public QWidget {
    Q_OBJECT
public:
    explicit ParamForm(QWidget* parent = nullptr);

    // Rebuilds the form for `specs` and shows `values` (missing values show the declared default).
    void setSpecs(const std::vector<ParamSpec>& specs, const nlohmann::json& values);
    // Updates the shown values without emitting parameterEdited and without rebuilding (keeps focus).
    void setValues(const nlohmann::json& values);
    QWidget* editor(const std::string& name) const;   // nullptr when absent
    QList<QWidget*> editorsInOrder() const;            // as declared: the order Tab should follow

signals:
    void parameterEdited(const QString& name, const QString& jsonValue);   // jsonValue: the value as JSON text

private:
    QWidget* makeEditor(const ParamSpec& spec);
    void showValue(const ParamSpec& spec, QWidget* editor, const nlohmann::json& value);
    void report(const std::string& name, const nlohmann::json& value);
    static void forgetTyping(QWidget* field);

    QFormLayout* mLayout;
    std::vector<ParamSpec> mSpecs;
    std::map<std::string, QWidget*> mEditors;
};

} // namespace cwb
