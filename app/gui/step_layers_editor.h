#pragma once
// Which layers a recipe step takes, edited in place: its "targets" regex, its "ignore" patterns (one per line) and its
// per-layer overrides (pattern + parameters as JSON; the first matching override applies). Each finished edit that
// makes a valid step is reported through stepEdited (the pipeline editor turns it into one undo command); an edit
// that does not is kept in the fields, not applied, and the reason is shown. Against the loaded model it shows how
// many linear layers the step takes and how many of them an override changes, and warns of a pattern that names no
// layer (the run would stop there).
#include <QWidget>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QToolButton;
class QTableWidget;

namespace cwb {

class Model;
struct RecipeStep;

class StepLayersEditor : public QWidget {
    Q_OBJECT
public:
    explicit StepLayersEditor(QWidget* parent = nullptr);

    // Shows step `index` of `steps` (the variant's steps; earlier ones decide whether layer names are the base
    // model's). Edits not yet applied to the same step survive a reload that leaves its layer fields as they were
    // (a parameter changed in the form, say). `model` may be null: then nothing is counted.
    // `owner` names whose steps they are (the variant), so that pending edits stay with their step.
    void setStep(const QString& owner, const nlohmann::json& steps, int index, std::shared_ptr<const Model> model);
    void clear();

    // Reads the fields and applies them when they make a valid step that differs from the shown one: emits
    // stepEdited and returns true. Otherwise returns false and shows why (problem()).
    bool commit();
    // Puts the fields back to the step as the project has it.
    void revert();

    // What the fields say: the shown step with their targets, ignore and overrides; problem() says why it cannot be
    // applied ("" when it can).
    nlohmann::json editedStep() const;
    QString problem() const { return mProblem; }   // red: not applied
    QString warning() const { return mWarning; }   // orange: applied, but a run would stop or an override does nothing
    QString note() const { return mNote; }         // neutral: an override row not filled in yet
    QString summary() const;   // the counts line as shown
    bool hasPendingEdits() const { return mPending; }

    // Edits of a step that were not applied (an invalid pattern, an override row not filled in) are kept with their
    // step when another step is shown, and come back when it is shown again as it was (they were lost, GUI probe).
    struct KeptEdits {
        QString owner;
        int index = -1;
        QString problem;   // why they were not applied
    };
    std::vector<KeptEdits> keptEdits() const;
    bool keepsEditsFor(const QString& owner, int index) const;
    // Drops kept edits whose step is no longer as it was (`stepsOf` gives a variant's steps now): they would not apply.
    void dropStaleEdits(const std::function<nlohmann::json(const QString&)>& stepsOf);
    void forgetKeptEdits();

    QLineEdit* targetsEdit() const { return mTargets; }
    QPlainTextEdit* ignoreEdit() const { return mIgnore; }
    QTableWidget* overridesTable() const { return mOverrides; }
    void addOverrideRow();
    void removeOverrideRow(int row);
    void moveOverrideRow(int row, int delta);

signals:
    // `owner` as given to setStep: the pipeline editor writes only into the variant the edit was made in.
    void stepEdited(const QString& owner, int index, const nlohmann::json& step);
    void keptEditsChanged();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void load(const nlohmann::json& layerFields);
    // The layer fields the widgets say; `problem`: why they make no step, `incomplete`: an added row not filled in.
    nlohmann::json fieldsFromWidgets(QString* problem, QString* incomplete = nullptr) const;
    void describeLayers(const RecipeStep& step);
    QString quantizationLostBy(const RecipeStep& edited, const std::vector<std::string>& taken) const;
    void validate();
    void showState();
    void updateRevert();
    // A step's fields as typed, kept while another step is shown.
    struct Draft {
        QString owner;
        int index = -1;
        nlohmann::json steps;   // the variant's steps then
        nlohmann::json shown;   // the step's layer fields then
        QString targets, ignore, problem;
        std::vector<std::pair<QString, QString>> rows;
        std::vector<bool> newRows;
    };
    static bool draftFits(const Draft& d, const nlohmann::json& steps);
    void keepEdits();
    bool restoreKeptEdits(const nlohmann::json& fields);
    void forgetTyping();   // clears the text fields' own undo history   // Revert is on while the fields differ from the project's step

    QString mOwner;
    nlohmann::json mSteps = nlohmann::json::array();
    int mIndex = -1;
    std::shared_ptr<const Model> mModel;
    nlohmann::json mShown;   // the layer fields of the step as the project has it
    bool mPending = false;
    bool mLoading = false;
    QString mProblem, mWarning, mNote, mSummary, mLayerList;
    std::vector<Draft> mDrafts;

    QLineEdit* mTargets;
    QPlainTextEdit* mIgnore;
    QTableWidget* mOverrides;
    QPushButton* mRemoveOverride;
    QToolButton* mUp;     // arrows: two more 80 px buttons made the pane too wide to share (GUI probe)
    QToolButton* mDown;
    QPushButton* mRevert;
    QLabel* mStatus;
};

// Whether `steps` differ from `before` only in step `index`'s parameters and layer fields: the same step is shown.
bool sameStepOf(const nlohmann::json& before, const nlohmann::json& steps, int index);

// The layer fields of a step in one normalised form: {"targets": "", "ignore": [], "overrides": []} with what the
// step has.
nlohmann::json stepLayerFields(const nlohmann::json& step);

} // namespace cwb
