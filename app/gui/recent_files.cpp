#include "app/gui/recent_files.h"

#include <QDir>
#include <QFileInfo>
#include <QFontMetrics>
#include <QSettings>

namespace cwb {

namespace {
constexpr int kMaximum = 10;
const char* kKey = "recentFiles";
} // namespace

RecentFilesMenu::RecentFilesMenu(QWidget* parent) : QMenu(tr("Open &Recent"), parent) { rebuild(); }

QStringList RecentFilesMenu::files() const { return QSettings().value(kKey).toStringList(); }

void RecentFilesMenu::add(const QString& path) {
    QStringList list = files();
    const QString absolute = QFileInfo(path).absoluteFilePath();
    list.removeAll(absolute);
    list.prepend(absolute);
    while (list.size() > kMaximum) list.removeLast();
    QSettings().setValue(kKey, list);
    rebuild();
    emit changed();
}

QString recentFileLabel(const QString& path, const QFontMetrics& metrics, int folderWidth) {
    const QFileInfo info(path);
    QString folder = QDir::toNativeSeparators(info.absolutePath());
    const QString home = QDir::toNativeSeparators(QDir::homePath());
    if (home.size() > 1 && (folder == home || folder.startsWith(home + QDir::separator()))) folder = "~" + folder.mid(home.size());
    QString label = info.fileName() + QStringLiteral("  —  ") + metrics.elidedText(folder, Qt::ElideLeft, folderWidth);
    if (!info.exists()) label += QObject::tr("  (not found)");
    return label;
}

void RecentFilesMenu::remove(const QString& path) {
    QStringList list = files();
    if (list.removeAll(path) == 0) return;
    QSettings().setValue(kKey, list);
    rebuild();
    emit changed();
}

void RecentFilesMenu::rebuild() {
    clear();
    setToolTipsVisible(true);
    const QStringList list = files();
    // The name alone could not tell model.gguf from model.gguf, nor two Hugging Face snapshot folders (GUI probe).
    const int folderWidth = fontMetrics().averageCharWidth() * 48;
    for (int i = 0; i < list.size(); ++i) {
        QString label = recentFileLabel(list[i], fontMetrics(), folderWidth);
        label.replace('&', QStringLiteral("&&"));
        QAction* action = addAction(QStringLiteral("&%1 %2").arg((i + 1) % 10).arg(label));
        action->setToolTip(list[i]);
        action->setStatusTip(list[i]);
        const QString path = list[i];
        connect(action, &QAction::triggered, this, [this, path] { emit fileChosen(path); });
    }
    if (list.isEmpty()) addAction(tr("(none)"))->setEnabled(false);
    else {
        addSeparator();
        connect(addAction(tr("Clear list")), &QAction::triggered, this, [this] {
            QSettings().remove(kKey);
            rebuild();
            emit changed();
        });
    }
}

} // namespace cwb
