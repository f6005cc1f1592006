// Pruning math: magnitude, Wanda and n:m masks on hand-checked cases, input norms, and SparseGPT against an
// OBS reference written here from the closed form, plus its advantage over magnitude pruning.
// ATen before Qt: ATen uses `slots` as an identifier, which Qt's keyword macro would rewrite.
#include "core/compress/prune_math.h"
#include "core/compress/sparsegpt_math.h"
#include "core/util/error.h"

#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <vector>

using namespace cwb;
using namespace cwb::prune;

namespace {

at::Tensor matrix(const QList<double>& values, int64_t rows) {
    std::vector<double> v(values.begin(), values.end());
    return at::tensor(v, at::kDouble).to(at::kFloat).reshape({rows, -1});
}

// "0110 1001": one group of digits per row, 1 = keep.
at::Tensor maskFrom(const QString& pattern) {
    const QStringList rows = pattern.split(' ', Qt::SkipEmptyParts);
    std::vector<int64_t> bits;
    for (const QString& row : rows)
        for (QChar c : row) bits.push_back(c == '1');
    return at::tensor(bits, at::kLong).reshape({int64_t(rows.size()), -1}).to(at::kBool);
}

QByteArray show(const at::Tensor& t) {
    std::ostringstream s;
    s << t.to(at::kFloat);
    return QByteArray::fromStdString(s.str());
}

// Correlated calibration inputs: columns mix through a random matrix and have unequal scales, shuffled so
// that no block of columns is systematically louder than another.
at::Tensor correlatedInputs(int64_t samples, int64_t columns) {
    at::Tensor mix = at::randn({columns, columns}, at::kDouble) + 2.0 * at::eye(columns, at::kDouble);
    at::Tensor scale = at::linspace(0.2, 3.0, columns, at::kDouble).index_select(0, at::randperm(columns, at::kLong));
    return at::randn({samples, columns}, at::kDouble).matmul(mix) * scale;
}

at::Tensor dampedHessian(const at::Tensor& x, double damp) {
    at::Tensor h = 2.0 / double(x.size(0)) * x.t().matmul(x);
    return h + damp * h.diagonal().mean() * at::eye(h.size(0), at::kDouble);
}

struct Obs {
    std::vector<std::vector<double>> w;
    std::vector<std::vector<bool>> keep;
    double loss = 0;
};

// Reference OBS, one column at a time. When column q is fixed the free columns are F = {q, q+1, ...}; removing
// w_q optimally costs w_q² / [H_F⁻¹]_00 and moves the free weights by δ = −w_q / [H_F⁻¹]_00 · [H_F⁻¹]_{:,0}.
// Equivalence with SparseGPT: if H⁻¹ = UᵀU (U upper), eliminating column q from H⁻¹ is one Cholesky step,
// so U_qq² = [H_F⁻¹]_00 and U_{q,q:} = [H_F⁻¹]_{0,:} / U_qq. SparseGPT's score w²/U_qq² is therefore
// w² / [H_F⁻¹]_00 (the inverse of the sub-Hessian of the still-free columns, not [H⁻¹]_qq of the full one)
// and its update (w_q/U_qq)·U_{q,q:} is δ above. Here H_F⁻¹ comes from an explicit inverse, not Cholesky.
Obs directObs(const at::Tensor& w, const at::Tensor& h, double sparsity, int n, int m) {
    const int64_t rows = w.size(0), cols = w.size(1);
    Obs r;
    r.w.assign(rows, std::vector<double>(cols));
    r.keep.assign(rows, std::vector<bool>(cols, true));
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) r.w[i][j] = w[i][j].item<double>();
    std::vector<at::Tensor> inverses;
    for (int64_t q = 0; q < cols; ++q) inverses.push_back(at::linalg_inv(h.narrow(0, q, cols - q).narrow(1, q, cols - q)));
    auto pivot = [&](int64_t q) { return inverses[q][0][0].item<double>(); };
    auto pruneLowest = [&](int64_t row, int64_t first, int64_t count, int64_t k) {
        std::vector<int64_t> order(count);
        std::iota(order.begin(), order.end(), first);
        auto score = [&](int64_t j) { return r.w[row][j] * r.w[row][j] / pivot(j); };
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score(a) < score(b); });
        for (int64_t t = 0; t < k; ++t) r.keep[row][order[t]] = false;
    };
    if (m == 0)
        for (int64_t i = 0; i < rows; ++i) pruneLowest(i, 0, cols, std::llround(sparsity * double(cols)));
    for (int64_t q = 0; q < cols; ++q) {
        if (m > 0 && q % m == 0)
            for (int64_t i = 0; i < rows; ++i) pruneLowest(i, q, m, m - n);
        const at::Tensor& inv = inverses[q];
        for (int64_t i = 0; i < rows; ++i) {
            if (r.keep[i][q]) continue;
            const double wq = r.w[i][q];
            r.loss += 0.5 * wq * wq / pivot(q);
            for (int64_t j = 0; j < cols - q; ++j) r.w[i][q + j] -= wq / pivot(q) * inv[j][0].item<double>();
            r.w[i][q] = 0.0;
        }
    }
    return r;
}

double outputError(const at::Tensor& w, const at::Tensor& pruned, const at::Tensor& x) {
    return (w.to(at::kDouble) - pruned.to(at::kDouble)).matmul(x.t()).norm().item<double>();
}

} // namespace

class TestPruneMath : public QObject {
    Q_OBJECT
private slots:
    void nmMaskKeepsTwoOfEveryFour();
    void nmMaskKeepsHighest_data();
    void nmMaskKeepsHighest();
    void nmMaskRefusesBadShape_data();
    void nmMaskRefusesBadShape();
    void magnitudeMaskPrunesSmallest_data();
    void magnitudeMaskPrunesSmallest();
    void magnitudeMaskExactCountOnRandom();
    void rowwiseMaskPrunesEachRow();
    void wandaScoresHand();
    void wandaDiffersFromMagnitude();
    void inputNormsAccumulateOverBatches();
    void sparsityOfCountsZeros();
    void badSparsityRefused_data();
    void badSparsityRefused();
    void sparseGptMatchesDirectObs_data();
    void sparseGptMatchesDirectObs();
    void sparseGptBeatsMagnitude_data();
    void sparseGptBeatsMagnitude();
    void sparseGptZeroesDeadColumns();
    void sparseGptRefusesBadInput();
};

void TestPruneMath::nmMaskKeepsTwoOfEveryFour() {
    at::manual_seed(1);
    at::Tensor scores = at::randn({64, 64});
    at::Tensor keep = nmMask(scores, 2, 4);
    QCOMPARE(keep.sizes().vec(), scores.sizes().vec());
    at::Tensor perGroup = keep.reshape({64, 16, 4}).sum(-1);
    QVERIFY2((perGroup == 2).all().item<bool>(), "a group of four does not keep exactly two");
    // Every kept score beats every pruned score of its group.
    at::Tensor s = scores.reshape({64, 16, 4}), k = keep.reshape({64, 16, 4});
    at::Tensor lowestKept = s.masked_fill(k.logical_not(), std::numeric_limits<float>::infinity()).amin(-1);
    at::Tensor highestPruned = s.masked_fill(k, -std::numeric_limits<float>::infinity()).amax(-1);
    QVERIFY((lowestKept > highestPruned).all().item<bool>());
}

void TestPruneMath::nmMaskKeepsHighest_data() {
    QTest::addColumn<QList<double>>("scores");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("m");
    QTest::addColumn<QString>("expected");
    QTest::newRow("2:4 one row") << QList<double>{1, 4, 3, 2, 0.5, -1, 9, 8} << 1 << 2 << 4 << "0110 0011";
    QTest::newRow("2:4 two rows") << QList<double>{5, 1, 0, 6, -3, -1, -2, -4} << 2 << 2 << 4 << "1001 0110";
    QTest::newRow("1:4") << QList<double>{1, 4, 3, 2, 0.5, -1, 9, 8} << 1 << 1 << 4 << "0100 0010";
    QTest::newRow("3:4") << QList<double>{1, 4, 3, 2, 0.5, -1, 9, 8} << 1 << 3 << 4 << "0111 1011";
    QTest::newRow("1:2") << QList<double>{1, 2, 4, 3} << 1 << 1 << 2 << "0110";
}

void TestPruneMath::nmMaskKeepsHighest() {
    QFETCH(QList<double>, scores);
    QFETCH(int, rows);
    QFETCH(int, n);
    QFETCH(int, m);
    QFETCH(QString, expected);
    at::Tensor keep = nmMask(matrix(scores, rows), n, m);
    at::Tensor want = maskFrom(expected).reshape(keep.sizes());
    QVERIFY2(at::equal(keep, want), show(keep).constData());
}

void TestPruneMath::nmMaskRefusesBadShape_data() {
    QTest::addColumn<int>("columns");
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("m");
    QTest::newRow("in % m != 0") << 6 << 2 << 4;
    QTest::newRow("n == m") << 8 << 4 << 4;
    QTest::newRow("n > m") << 8 << 5 << 4;
    QTest::newRow("n == 0") << 8 << 0 << 4;
}

void TestPruneMath::nmMaskRefusesBadShape() {
    QFETCH(int, columns);
    QFETCH(int, n);
    QFETCH(int, m);
    QVERIFY_THROWS_EXCEPTION(Error, nmMask(at::ones({2, columns}), n, m));
}

void TestPruneMath::magnitudeMaskPrunesSmallest_data() {
    QTest::addColumn<double>("sparsity");
    QTest::addColumn<QString>("expected");
    // |w| ascending: 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4.
    QTest::newRow("0") << 0.0 << "1111 1111";
    QTest::newRow("25%") << 0.25 << "1101 1110";
    QTest::newRow("50%") << 0.5 << "0101 0110";
    QTest::newRow("75%") << 0.75 << "0100 0010";
    QTest::newRow("0.3 rounds to 2 of 8") << 0.3 << "1101 1110";
}

void TestPruneMath::magnitudeMaskPrunesSmallest() {
    QFETCH(double, sparsity);
    QFETCH(QString, expected);
    at::Tensor w = matrix({0.5, -3, 0.1, 2, -0.2, 1, -4, 0.05}, 2);
    at::Tensor keep = magnitudeMask(w, sparsity);
    QVERIFY2(at::equal(keep, maskFrom(expected)), show(keep).constData());
}

void TestPruneMath::magnitudeMaskExactCountOnRandom() {
    at::manual_seed(2);
    at::Tensor w = at::randn({37, 53});
    at::Tensor keep = magnitudeMask(w, 0.3);
    QCOMPARE(keep.logical_not().sum().item<int64_t>(), std::llround(0.3 * 37 * 53));
    const float largestPruned = w.abs().masked_select(keep.logical_not()).max().item<float>();
    const float smallestKept = w.abs().masked_select(keep).min().item<float>();
    QVERIFY(largestPruned <= smallestKept);
}

void TestPruneMath::rowwiseMaskPrunesEachRow() {
    // A whole-matrix threshold would prune all of row 0; Wanda's group is the row, so each row loses two.
    at::Tensor scores = matrix({1, 2, 3, 4, 40, 10, 30, 20}, 2);
    at::Tensor keep = rowwiseMask(scores, 0.5);
    QVERIFY2(at::equal(keep, maskFrom("0011 1010")), show(keep).constData());
    QVERIFY(at::equal(magnitudeMask(scores, 0.5), maskFrom("0000 1111")));
    at::manual_seed(3);
    at::Tensor keepRandom = rowwiseMask(at::randn({9, 20}), 0.25);
    QVERIFY((keepRandom.logical_not().sum(1) == 5).all().item<bool>());
}

void TestPruneMath::wandaScoresHand() {
    at::Tensor scores = wandaScores(matrix({1, -2, 3, 0.5}, 2), at::tensor({10.0f, 1.0f}));
    QVERIFY2(at::allclose(scores, matrix({10, 2, 30, 0.5}, 2)), show(scores).constData());
    QVERIFY_THROWS_EXCEPTION(Error, wandaScores(matrix({1, 2, 3, 4}, 2), at::ones({3})));
}

void TestPruneMath::wandaDiffersFromMagnitude() {
    // Input channel 2 has a huge norm, so its small weight matters more than the larger weights elsewhere.
    at::Tensor w = matrix({1, 2, 0.5, 3}, 1);
    at::Tensor norms = at::tensor({1.0f, 1.0f, 100.0f, 1.0f});
    at::Tensor byMagnitude = magnitudeMask(w, 0.5);
    at::Tensor byWanda = rowwiseMask(wandaScores(w, norms), 0.5);
    QVERIFY2(at::equal(byMagnitude, maskFrom("0101")), show(byMagnitude).constData());
    QVERIFY2(at::equal(byWanda, maskFrom("0011")), show(byWanda).constData());
}

void TestPruneMath::inputNormsAccumulateOverBatches() {
    InputNormAccumulator hand(2);
    hand.add(matrix({3, 4}, 1));
    hand.add(matrix({4, 3}, 1));
    QVERIFY2(at::allclose(hand.norms(), at::tensor({5.0f, 5.0f})), show(hand.norms()).constData());

    at::manual_seed(4);
    at::Tensor a = at::randn({2, 3, 6}), b = at::randn({5, 6});
    InputNormAccumulator acc(6);
    acc.add(a);
    acc.add(b);
    at::Tensor direct = at::cat({a.reshape({-1, 6}), b}).norm(2, 0);
    QCOMPARE(acc.rows(), int64_t(11));
    QVERIFY(at::allclose(acc.norms(), direct, 1e-6, 1e-6));
    QVERIFY_THROWS_EXCEPTION(Error, acc.add(at::ones({2, 5})));
}

void TestPruneMath::sparsityOfCountsZeros() {
    QCOMPARE(sparsityOf(matrix({0, 1, 0, 2, 0, 0, 3, -0.0}, 2)), 5.0 / 8.0);
    QCOMPARE(sparsityOf(at::ones({3, 3})), 0.0);
}

void TestPruneMath::badSparsityRefused_data() {
    QTest::addColumn<double>("sparsity");
    QTest::newRow("negative") << -0.1;
    QTest::newRow("one") << 1.0;
    QTest::newRow("above one") << 1.5;
    QTest::newRow("NaN") << std::nan("");
}

void TestPruneMath::badSparsityRefused() {
    QFETCH(double, sparsity);
    at::Tensor w = at::randn({4, 8});
    QVERIFY_THROWS_EXCEPTION(Error, magnitudeMask(w, sparsity));
    QVERIFY_THROWS_EXCEPTION(Error, rowwiseMask(w, sparsity));
    SparseGptOptions o;
    o.sparsity = sparsity;
    QVERIFY_THROWS_EXCEPTION(Error, sparseGpt(w, at::eye(8), o));
}

void TestPruneMath::sparseGptMatchesDirectObs_data() {
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("columns");
    QTest::addColumn<double>("sparsity");
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("blockSize");
    QTest::newRow("2x4 50%") << 2 << 4 << 0.5 << 0 << 0 << 128;
    QTest::newRow("3x6 50%") << 3 << 6 << 0.5 << 0 << 0 << 6;
    QTest::newRow("4x6 1/3") << 4 << 6 << 1.0 / 3.0 << 0 << 0 << 128;
    QTest::newRow("2x4 2:4") << 2 << 4 << 0.0 << 2 << 4 << 128;
    QTest::newRow("3x8 2:4") << 3 << 8 << 0.0 << 2 << 4 << 128;
    // n:m masks do not depend on the block size, so this exercises the lazy between-block update.
    QTest::newRow("3x12 2:4 blocks of 4") << 3 << 12 << 0.0 << 2 << 4 << 4;
    QTest::newRow("3x12 1:3 blocks of 2→3") << 3 << 12 << 0.0 << 1 << 3 << 2;
}

void TestPruneMath::sparseGptMatchesDirectObs() {
    QFETCH(int, rows);
    QFETCH(int, columns);
    QFETCH(double, sparsity);
    QFETCH(int, n);
    QFETCH(int, m);
    QFETCH(int, blockSize);
    at::manual_seed(10 + rows * columns);
    at::Tensor x = correlatedInputs(64, columns);
    at::Tensor w = at::randn({rows, columns});
    at::Tensor h = 2.0 / 64.0 * x.t().matmul(x);
    SparseGptOptions o;
    o.sparsity = sparsity;
    o.n = n;
    o.m = m;
    o.blockSize = blockSize;
    SparseGptResult got = sparseGpt(w.to(at::kFloat), h.to(at::kFloat), o);
    at::Tensor hd = dampedHessian(x, o.dampPercent);
    Obs want = directObs(w.to(at::kDouble), hd, sparsity, n, m);

    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < columns; ++j) {
            QCOMPARE(got.mask[i][j].item<bool>(), bool(want.keep[i][j]));
            const double g = got.weight[i][j].item<double>(), e = want.w[i][j];
            QVERIFY2(std::fabs(g - e) <= 1e-4 * (1.0 + std::fabs(e)),
                     qPrintable(QString("w[%1][%2] = %3, OBS %4").arg(i).arg(j).arg(g).arg(e)));
            if (!want.keep[i][j]) QVERIFY(got.weight[i][j].item<float>() == 0.0f);   // exact, not fuzzy
        }
    QVERIFY2(std::fabs(got.squaredError - want.loss) <= 1e-4 * want.loss,
             qPrintable(QString("loss %1, OBS %2").arg(got.squaredError).arg(want.loss)));
    // The reported loss is the quadratic form itself: ½ Σ_rows ΔW H ΔWᵀ with the damped H.
    at::Tensor dw = w.to(at::kDouble) - got.weight.to(at::kDouble);
    const double quadratic = 0.5 * (dw.matmul(hd) * dw).sum().item<double>();
    QVERIFY2(std::fabs(got.squaredError - quadratic) <= 1e-4 * quadratic,
             qPrintable(QString("loss %1, quadratic form %2").arg(got.squaredError).arg(quadratic)));
}

void TestPruneMath::sparseGptBeatsMagnitude_data() {
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("m");
    QTest::newRow("50%") << 0 << 0;
    QTest::newRow("2:4") << 2 << 4;
}

void TestPruneMath::sparseGptBeatsMagnitude() {
    QFETCH(int, n);
    QFETCH(int, m);
    at::manual_seed(5);
    const int64_t rows = 32, columns = 64;
    at::Tensor x = correlatedInputs(512, columns);
    at::Tensor w = at::randn({rows, columns}).to(at::kFloat);
    SparseGptOptions o;
    o.n = n;
    o.m = m;
    o.blockSize = 16;
    SparseGptResult r = sparseGpt(w, (2.0 / 512.0 * x.t().matmul(x)).to(at::kFloat), o);
    at::Tensor magnitude = m > 0 ? nmMask(w.abs(), n, m) : magnitudeMask(w, 0.5);
    at::Tensor wandaScore = wandaScores(w, x.norm(2, 0).to(at::kFloat));
    at::Tensor wanda = m > 0 ? nmMask(wandaScore, n, m) : rowwiseMask(wandaScore, 0.5);
    const double sparseGptError = outputError(w, r.weight, x);
    const double magnitudeError = outputError(w, w * magnitude, x);
    qInfo("output error ||(W - W')X^T||: SparseGPT %.4g, Wanda %.4g, magnitude %.4g (SparseGPT/magnitude %.3f)",
          sparseGptError, outputError(w, w * wanda, x), magnitudeError, sparseGptError / magnitudeError);
    QVERIFY(sparseGptError < magnitudeError);
    QCOMPARE(sparsityOf(r.weight), 0.5);
    QVERIFY(at::equal(r.weight == 0, r.mask.logical_not()));
    if (m > 0) QVERIFY((r.mask.reshape({rows, columns / m, m}).sum(-1) == n).all().item<bool>());
    else QVERIFY((r.mask.logical_not().sum(1) == columns / 2).all().item<bool>());
}

void TestPruneMath::sparseGptZeroesDeadColumns() {
    at::manual_seed(6);
    at::Tensor x = correlatedInputs(64, 8);
    x.select(1, 3).zero_();   // input 3 never fires
    at::Tensor w = at::randn({4, 8}) + 5.0;   // all weights large, so only the dead column's score is zero
    SparseGptOptions o;
    o.sparsity = 0.25;
    SparseGptResult r = sparseGpt(w, (2.0 / 64.0 * x.t().matmul(x)).to(at::kFloat), o);
    QVERIFY(at::isfinite(r.weight).all().item<bool>());
    QVERIFY((r.weight.select(1, 3) == 0).all().item<bool>());
    QVERIFY(r.mask.select(1, 3).logical_not().all().item<bool>());
}

void TestPruneMath::sparseGptRefusesBadInput() {
    at::Tensor w = at::randn({4, 8});
    SparseGptOptions o;
    QVERIFY_THROWS_EXCEPTION(Error, sparseGpt(w, at::eye(7), o));
    QVERIFY_THROWS_EXCEPTION(Error, sparseGpt(w, at::ones({8}), o));
    at::Tensor nanHessian = at::eye(8);
    nanHessian[2][2] = std::nan("");
    QVERIFY_THROWS_EXCEPTION(Error, sparseGpt(w, nanHessian, o));
    SparseGptOptions nm = o;
    nm.n = 4;
    nm.m = 4;
    QVERIFY_THROWS_EXCEPTION(Error, sparseGpt(w, at::eye(8), nm));
    nm.n = 2;
    nm.m = 3;   // 8 % 3 != 0
    QVERIFY_THROWS_EXCEPTION(Error, sparseGpt(w, at::eye(8), nm));
    SparseGptOptions block = o;
    block.blockSize = 0;
    QVERIFY_THROWS_EXCEPTION(Error, sparseGpt(w, at::eye(8), block));
    // Indefinite and not rescued by dampening.
    SparseGptOptions undamped = o;
    undamped.dampPercent = 0.0;
    at::Tensor indefinite = at::eye(8);
    indefinite[0][1] = 2.0f;
    indefinite[1][0] = 2.0f;
    QVERIFY_THROWS_EXCEPTION(Error, sparseGpt(w, indefinite, undamped));
}

QTEST_APPLESS_MAIN(TestPruneMath)
#include "test_prune_math.moc"
