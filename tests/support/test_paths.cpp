#include "tests/support/test_paths.h"

#include <QFileInfo>
#include <QProcessEnvironment>

namespace cwb::test {

QString fixture(const QString& relative) {
    const QString path = QStringLiteral(CWB_FIXTURES_DIR) + "/" + relative;
    return QFileInfo::exists(path) ? path : QString();
}

QString cwbBinary() { return QProcessEnvironment::systemEnvironment().value("CWB_BINARY"); }

} // namespace cwb::test
