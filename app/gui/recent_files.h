#pragma once
// The recently opened models and projects (QSettings "recentFiles", newest first, at most 10), as a menu.
#include <QMenu>
#include <QStringList>

namespace cwb {

class RecentFilesMenu : public QMenu {
    Q_OBJECT
public:
    explicit RecentFilesMenu(QWidget* parent = nullptr);
    void add(const QString& path);
    QStringList files() const;

signals:
    void fileChosen(const QString& path);

private:
    void rebuild();
};

} // namespace cwb
