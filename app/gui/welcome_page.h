#pragma once
// What the window shows with nothing open: what can be opened, the buttons to open it, and the recently opened files
// (the empty window showed four disabled tabs and "Open a model or project.", GUI probe).
#include <QStringList>
#include <QWidget>

class QListWidget;
class QLabel;

namespace cwb {

class WelcomePage : public QWidget {
    Q_OBJECT
public:
    explicit WelcomePage(QWidget* parent = nullptr);
    // The recent files, newest first (RecentFilesMenu::files); missing ones are listed greyed, with "(not found)".
    void setRecentFiles(const QStringList& paths);
    QListWidget* recentList() const { return mRecent; }

signals:
    void openModelRequested();
    void openProjectRequested();
    void recentChosen(const QString& path);

private:
    QListWidget* mRecent;
    QLabel* mRecentTitle;
};

} // namespace cwb
