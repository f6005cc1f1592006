#include "app/gui/recent_files.h"

#include <QFileInfo>
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
}

void RecentFilesMenu::rebuild() {
    clear();
    const QStringList list = files();
    for (int i = 0; i < list.size(); ++i) {
        QAction* action = addAction(QStringLiteral("&%1 %2").arg((i + 1) % 10).arg(QFileInfo(list[i]).fileName()));
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
        });
    }
}

} // namespace cwb
