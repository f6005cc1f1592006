// ParamForm: float parameters at the scale of learning rates (typed in scientific notation, shown to full
// precision, stepped by their leading digit), and a wheel over an unfocused editor leaves its value alone.
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QSignalSpy>
#include <QSpinBox>
#include <QWheelEvent>
#include <QtTest/QtTest>

#include "app/gui/param_form.h"

using namespace cwb;

namespace {

std::vector<ParamSpec> specs() {
    return {floatParam("lr", 0.0, 1.0, 1e-3, "learning rate"), intParam("steps", 1, 1000, 200, "steps"),
            floatParam("temperature", 0.1, 100.0, 4.0, "T")};
}

void wheel(QWidget* w, int delta) {
    QWheelEvent event(QPointF(5, 5), w->mapToGlobal(QPointF(5, 5)), QPoint(), QPoint(0, delta), Qt::NoButton, Qt::NoModifier,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(w, &event);
}

} // namespace

class TestParamForm : public QObject {
    Q_OBJECT
private slots:
    void smallFloatsAreShownTypedAndStepped() {
        ParamForm form;
        form.setSpecs(specs(), {{"lr", 2e-5}});
        auto* lr = qobject_cast<QDoubleSpinBox*>(form.editor("lr"));
        QVERIFY(lr);
        QCOMPARE(lr->value(), 2e-5);   // was rounded to 0.0000 with 4 decimals
        QCOMPARE(lr->text(), QString("2e-05"));
        QSignalSpy edited(&form, &ParamForm::parameterEdited);
        QLineEdit* line = lr->findChild<QLineEdit*>();
        QVERIFY(line);
        line->selectAll();
        QTest::keyClicks(lr, "3e-5");
        QTest::keyClick(lr, Qt::Key_Return);
        QCOMPARE(lr->value(), 3e-5);
        QVERIFY(!edited.isEmpty());
        QCOMPARE(nlohmann::json::parse(edited.last().at(1).toString().toStdString()).get<double>(), 3e-5);

        form.setValues({{"lr", 1e-3}});
        lr->stepBy(1);
        QCOMPARE(lr->value(), 2e-3);
        lr->setValue(1e-3);
        lr->stepBy(-1);
        QVERIFY(std::abs(lr->value() - 9e-4) < 1e-15);
        auto* temperature = qobject_cast<QDoubleSpinBox*>(form.editor("temperature"));
        temperature->setValue(4.0);
        temperature->stepBy(1);
        QVERIFY(temperature->value() > 4.0);   // large values step linearly
    }

    void wheelWithoutFocusChangesNothing() {
        ParamForm form;
        form.setSpecs(specs(), {});
        form.show();
        auto* steps = qobject_cast<QSpinBox*>(form.editor("steps"));
        QVERIFY(steps);
        QCOMPARE(steps->focusPolicy(), Qt::StrongFocus);
        QSignalSpy edited(&form, &ParamForm::parameterEdited);
        QVERIFY(!steps->hasFocus());
        wheel(steps, 120);
        QCOMPARE(steps->value(), 200);
        QVERIFY(edited.isEmpty());
    }

    // Regression (GUI probe): GPTQ's group_size took 0, an undo step was pushed, and the run refused it later; a
    // damping box sized from its 0…1 range showed "0.(".
    void refusedValuesAreNotTaken() {
        ParamSpec group = intParam("group_size", -1, 65536, 128, "group");
        group.excluded = {0};
        ParamForm form;
        form.setSpecs({group, floatParam("damp", 0.0, 1.0, 0.01, "damping")}, {{"group_size", 1}});
        auto* box = qobject_cast<QSpinBox*>(form.editor("group_size"));
        QVERIFY(box);
        QSignalSpy edited(&form, &ParamForm::parameterEdited);
        box->stepBy(-1);   // 1, past 0, to -1
        QCOMPARE(box->value(), -1);
        box->stepBy(1);
        QCOMPARE(box->value(), 1);
        QLineEdit* line = box->findChild<QLineEdit*>();
        QVERIFY(line);
        line->selectAll();
        QTest::keyClicks(box, "0");
        QTest::keyClick(box, Qt::Key_Return);
        QCOMPARE(box->value(), 1);
        for (const auto& signal : edited) QVERIFY2(signal.at(1).toString() != "0", "group_size 0 was reported as an edit");
        auto* damp = qobject_cast<QDoubleSpinBox*>(form.editor("damp"));
        QVERIFY(damp);
        QVERIFY(damp->minimumWidth() > damp->fontMetrics().horizontalAdvance(QStringLiteral("0.00012345")));
    }
};

QTEST_MAIN(TestParamForm)
#include "test_param_form.moc"
