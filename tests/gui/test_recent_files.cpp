// RecentFilesMenu: entries name the file and its folder, newest first, and say when a file is gone.
#include <QAction>
#include <QDir>
#include <QFile>
#include <QFontMetrics>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include "app/gui/recent_files.h"

using namespace cwb;

class TestRecentFiles : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void entriesTellFilesOfTheSameNameApart();
    void labelElidesLongFoldersAndSaysMissingFiles();
};

void TestRecentFiles::initTestCase() {
    QCoreApplication::setOrganizationName("cwb-tests");   // a test-only settings file
    QCoreApplication::setApplicationName("test_recent_files");
    QSettings().clear();
}

// Regression (GUI probe): Open Recent showed file names only, so two projects named project.cwbproj, or two snapshot
// folders of a Hugging Face cache, read the same.
void TestRecentFiles::entriesTellFilesOfTheSameNameApart() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QVERIFY(QDir(dir.path()).mkpath("first") && QDir(dir.path()).mkpath("second & more"));
    const QString a = dir.filePath("first/project.cwbproj"), b = dir.filePath("second & more/project.cwbproj");
    for (const QString& path : {a, b}) {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
    }
    RecentFilesMenu menu;
    menu.add(a);
    menu.add(b);
    QCOMPARE(menu.files(), QStringList({b, a}));
    QStringList texts;
    for (QAction* action : menu.actions())
        if (!action->isSeparator()) texts << action->text();
    QCOMPARE(texts.size(), 3);   // two files and "Clear list"
    QVERIFY2(texts[0].startsWith("&1 project.cwbproj") && texts[0].contains("second && more"), qPrintable(texts[0]));
    QVERIFY2(texts[1].startsWith("&2 project.cwbproj") && texts[1].contains("first"), qPrintable(texts[1]));
    QVERIFY(texts[0] != texts[1]);
    QVERIFY(menu.toolTipsVisible());
    QCOMPARE(menu.actions().front()->toolTip(), b);
    QSignalSpy chosen(&menu, &RecentFilesMenu::fileChosen);
    menu.actions().front()->trigger();
    QCOMPARE(chosen.size(), 1);
    QCOMPARE(chosen.front().front().toString(), b);
}

void TestRecentFiles::labelElidesLongFoldersAndSaysMissingFiles() {
    const QFontMetrics metrics(QGuiApplication::font());
    const QString deep = QDir::rootPath() + QString("very-long-folder-name/").repeated(12) + "model.gguf";
    const QString label = recentFileLabel(deep, metrics, metrics.averageCharWidth() * 30);
    QVERIFY2(label.startsWith("model.gguf  —  ") && label.contains(QChar(0x2026)), qPrintable(label));   // elided: …
    QVERIFY2(label.endsWith("/very-long-folder-name  (not found)"), qPrintable(label));   // the nearest folder kept
    const QString home = QDir::homePath() + "/m.gguf";
    QVERIFY2(recentFileLabel(home, metrics, 1000).contains(QStringLiteral("—  ~")), qPrintable(recentFileLabel(home, metrics, 1000)));
}

QTEST_MAIN(TestRecentFiles)
#include "test_recent_files.moc"
