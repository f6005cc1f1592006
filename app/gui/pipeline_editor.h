#pragma once
// The steps of the current variant: a variant chooser (new, duplicate to branch, remove), the step list
// (check box = enabled, drag or Alt+Up/Down to reorder, Delete to remove), a palette of the core's
// registered methods, and the selected step's generated parameter form and layers (targets, ignore, per-layer
// overrides). Every edit is an undo command.
#include <QWidget>

class QComboBox;
class QListWidget;
class QLabel;
class QPushButton;

namespace cwb {

class ParamForm;
class ProjectDocument;
class StepLayersEditor;

class PipelineEditor : public QWidget {
    Q_OBJECT
public:
    explicit PipelineEditor(QWidget* parent = nullptr);

    void setDocument(ProjectDocument* document);   // nullptr clears

    // The actions the menus and tests use; each pushes one undo command (or reports why it cannot).
    bool addStep(const QString& methodId);
    bool removeSelectedStep();
    bool moveSelectedStep(int delta);
    bool newVariant();
    bool duplicateVariant();
    bool removeVariant();
    // Renames the current variant; an empty `name` asks for one. A taken or reserved name is refused with a
    // message (a box when `interactive`; always in lastError()).
    bool renameVariant(const QString& name = {}, bool interactive = true);
    QString lastError() const { return mLastError; }
    // Applies what is typed in the Layers box but not yet applied (a target without Enter), as saving, closing and
    // running need; false when some of it cannot be applied (the box says why).
    bool commitPendingEdits();
    // After commitPendingEdits: every Layers edit that cannot be applied, the selected step's and those kept with
    // other steps, one line each ("variant 'a', step 2: ..."); kept edits whose step changed since are dropped.
    QStringList unappliedEdits();

    int stepCount() const;
    int selectedStep() const;
    void selectStep(int index);
    ParamForm* paramForm() const { return mForm; }
    StepLayersEditor* layersEditor() const { return mLayers; }
    QListWidget* stepList() const { return mSteps; }

private:
    void refreshVariants();
    void refreshSteps();
    void relabelSteps();   // marks the steps that keep Layers edits not applied
    void showSelectedStep();
    void stepsReordered(int from, int to);
    bool requireVariant();

    ProjectDocument* mDocument = nullptr;
    QComboBox* mVariants;
    QListWidget* mSteps;
    QListWidget* mPalette;
    ParamForm* mForm;
    StepLayersEditor* mLayers;
    QLabel* mStepTitle;
    class QScrollArea* mScroll = nullptr;
    QPushButton* mRemoveVariant;
    QPushButton* mDuplicateVariant;
    QPushButton* mRenameVariant;
    QPushButton* mStepUp;
    QPushButton* mStepDown;
    QPushButton* mRemoveStep;
    void updateButtons();   // enabled only where they would do something (they were clickable and did nothing)
    bool mRefreshing = false;
    QString mLastError;
};

} // namespace cwb
