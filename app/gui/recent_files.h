#pragma once
// The recently opened models and projects (QSettings "recentFiles", newest first, at most 10), as a menu.
#include <QMenu>
#include <QStringList>

class QFontMetrics;

namespace cwb {

// A menu entry's text: the file's name, then its folder (home as ~; a long one keeps its end, the folders nearest the file, within `folderWidth` pixels), and
// "(not found)" for a file no longer there.
QString recentFileLabel(const QString& path, const QFontMetrics& metrics, int folderWidth);

class RecentFilesMenu : public QMenu {
    Q_OBJECT
public:
    explicit RecentFilesMenu(QWidget* parent = nullptr);
    void add(const QString& path);
    void remove(const QString& path);
    QStringList files() const;

signals:
    void fileChosen(const QString& path);
    void changed();   // a file added, or the list cleared

private:
    void rebuild();
};

} // namespace cwb
