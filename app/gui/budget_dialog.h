#pragma once
// Budget solver (Project ▸ Budget Solver…): a target of bits per weight and candidate widths; Solve measures each
// layer's sensitivity at each width and chooses per-layer bits with the core's solveBitBudget on a worker thread
// (progress, Cancel); the table shows the chosen bits and the plan's bits per weight; Apply adds the proposed
// recipe (quantize.rtn with per-layer overrides) as a new variant, one undo step.
#include <QDialog>

#include <memory>
#include <vector>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace cwb {

class BackgroundJob;
class ProjectDocument;
struct BudgetPlan;

class BudgetDialog : public QDialog {
    Q_OBJECT
public:
    explicit BudgetDialog(ProjectDocument* document, QWidget* parent = nullptr);
    ~BudgetDialog() override;   // cancels and waits for a running solve

    void setTargetBitsPerWeight(double bits);
    // The budget as MiB of the block linear layers (levels, scales, zeros); sets bits per weight to match.
    void setTargetMiB(double mib);
    double targetBitsPerWeight() const;
    double targetMiB() const;
    void setMethod(const QString& methodId);   // "quantize.rtn", "quantize.gptq" or "quantize.awq"
    void setCandidateBits(const QString& list);   // "4,8" or "3,4,8"
    // One width for q/k/v and for gate/up of each block (what vLLM and a compressed-tensors export need).
    void setFusedSharedInputs(bool fused);
    // The output head as one more layer of the plan (BudgetOptions::includeHead); the size target then counts it.
    void setIncludeHead(bool head);
    void setWindowSize(int samples, int tokens);
    // Widths 2..8 from a comma list; empty with *error set when the list is not valid.
    static std::vector<int> parseBits(const QString& list, QString* error);

    // Starts solving; false (reason in lastError(), a message box when `interactive`) when it cannot start.
    bool solve(bool interactive = true);
    void cancel();
    bool isSolving() const;
    const BudgetPlan* plan() const { return mPlan.get(); }   // nullptr until a solve succeeds
    QTableWidget* table() const { return mTable; }
    QString summary() const;
    QString lastError() const { return mLastError; }

    // Adds the plan's recipe as a new variant ("" picks "budget-<bpw>bpw") and makes it current; returns the name,
    // "" when there is no plan or the name is taken (lastError() says which).
    QString applyAsVariant(const QString& name = {});

signals:
    void solved();
    void solveStarted(const QString& title);   // for the status bar (it said "idle" while the dialog measured, GUI probe)
    void solveFinished(bool succeeded);

private:
    void showPlan();

    ProjectDocument* mDocument;
    QDoubleSpinBox* mTarget;
    QDoubleSpinBox* mTargetMiB;   // the same budget as the linear layers' size, kept in step with mTarget
    QLineEdit* mBits;
    QSpinBox* mGroupSize;
    QComboBox* mMethod;   // the quantizer whose per-layer sensitivity is measured (and the recipe's step)
    QCheckBox* mFused = nullptr;
    QCheckBox* mHead = nullptr;
    double mMiBPerBit = 0;   // MiB of the planned layers per bit per weight
    void updateSizeScale();
    QSpinBox* mSamples;
    QSpinBox* mTokens;
    QPushButton* mSolve;
    QPushButton* mCancel;
    QPushButton* mApply;
    QProgressBar* mProgress;
    QLabel* mSummary;
    QTableWidget* mTable;
    std::unique_ptr<BackgroundJob> mJob;
    std::unique_ptr<BudgetPlan> mPlan;
    double mSolvingTarget = 0, mPlanTarget = 0;   // the target the running solve / the shown plan was made for
    bool mPlanStale = false;                      // an input changed after the plan was solved
    void inputsChanged();
    QString mLastError;
};

} // namespace cwb
