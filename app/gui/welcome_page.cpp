#include "app/gui/welcome_page.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

#include "app/gui/recent_files.h"

namespace cwb {

WelcomePage::WelcomePage(QWidget* parent) : QWidget(parent), mRecent(new QListWidget(this)), mRecentTitle(new QLabel(tr("Recent"), this)) {
    setObjectName(QStringLiteral("welcomePage"));
    auto* title = new QLabel(tr("Compression Workbench"), this);
    QFont big = title->font();
    big.setPointSizeF(big.pointSizeF() * 1.6);
    big.setBold(true);
    title->setFont(big);
    auto* text = new QLabel(tr("Open a model to compress it: a GGUF file, a Hugging Face folder (config.json and safetensors) or a "
                               "llama2.c checkpoint. Or open a project (.cwbproj) to go on with saved work. Files can also be "
                               "dropped on the window."),
                            this);
    text->setWordWrap(true);
    auto* openModel = new QPushButton(tr("Open Model…"), this);
    auto* openProject = new QPushButton(tr("Open Project…"), this);
    openModel->setObjectName(QStringLiteral("welcomeOpenModel"));
    openProject->setObjectName(QStringLiteral("welcomeOpenProject"));
    openModel->setDefault(true);
    connect(openModel, &QPushButton::clicked, this, &WelcomePage::openModelRequested);
    connect(openProject, &QPushButton::clicked, this, &WelcomePage::openProjectRequested);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(openModel);
    buttons->addWidget(openProject);
    buttons->addStretch();

    QFont bold = mRecentTitle->font();
    bold.setBold(true);
    mRecentTitle->setFont(bold);
    mRecent->setObjectName(QStringLiteral("welcomeRecent"));
    mRecent->setToolTip(tr("Double-click or press Enter to open"));
    connect(mRecent, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
        emit recentChosen(item->data(Qt::UserRole).toString());
    });

    auto* column = new QVBoxLayout;
    column->addSpacing(fontMetrics().height() * 3);
    column->addWidget(title);
    column->addSpacing(8);
    column->addWidget(text);
    column->addSpacing(12);
    column->addLayout(buttons);
    column->addSpacing(16);
    column->addWidget(mRecentTitle);
    column->addWidget(mRecent, 3);
    column->addStretch(1);   // all of it without recent files: the rest stays together at the top
    // A readable column, centred, whatever the window's width.
    auto* holder = new QWidget(this);
    holder->setLayout(column);
    holder->setMaximumWidth(fontMetrics().averageCharWidth() * 100);
    auto* outer = new QHBoxLayout(this);
    outer->addStretch();
    outer->addWidget(holder, 10);
    outer->addStretch();
    setRecentFiles({});
}

void WelcomePage::setRecentFiles(const QStringList& paths) {
    mRecent->clear();
    const int folderWidth = fontMetrics().averageCharWidth() * 60;
    for (const QString& path : paths) {
        auto* item = new QListWidgetItem(recentFileLabel(path, fontMetrics(), folderWidth), mRecent);
        item->setData(Qt::UserRole, path);
        item->setToolTip(path);
        if (!QFileInfo::exists(path)) item->setForeground(palette().color(QPalette::Disabled, QPalette::Text));
    }
    mRecent->setVisible(!paths.isEmpty());
    mRecentTitle->setVisible(!paths.isEmpty());
    if (mRecent->count() > 0) mRecent->setCurrentRow(0);
}

} // namespace cwb
