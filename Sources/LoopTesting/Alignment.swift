/// Aligns two sequences of renderings by their longest common subsequence, so that a diff of two
/// arrays of different lengths lists the inserted and removed elements rather than every element
/// after the first insertion.
enum Alignment {
    /// The index pairs `(expected, actual)` of elements kept in both, in increasing order.
    ///
    /// When the table would exceed `cellLimit` cells, elements are aligned by position instead.
    static func matches(_ expected: [String], _ actual: [String], cellLimit: Int) -> [(Int, Int)] {
        let rows = expected.count
        let columns = actual.count
        guard rows > 0, columns > 0 else { return [] }
        guard rows.multipliedReportingOverflow(by: columns).partialValue <= cellLimit else {
            return (0..<min(rows, columns)).filter { expected[$0] == actual[$0] }.map { ($0, $0) }
        }
        // lengths[i][j]: the length of the longest common subsequence of expected[i...] and actual[j...].
        var lengths = [[Int]](repeating: [Int](repeating: 0, count: columns + 1), count: rows + 1)
        for row in stride(from: rows - 1, through: 0, by: -1) {
            for column in stride(from: columns - 1, through: 0, by: -1) {
                lengths[row][column] =
                    expected[row] == actual[column]
                    ? lengths[row + 1][column + 1] + 1
                    : max(lengths[row + 1][column], lengths[row][column + 1])
            }
        }
        var pairs: [(Int, Int)] = []
        var row = 0
        var column = 0
        while row < rows && column < columns {
            if expected[row] == actual[column] {
                pairs.append((row, column))
                row += 1
                column += 1
            } else if lengths[row + 1][column] >= lengths[row][column + 1] {
                row += 1
            } else {
                column += 1
            }
        }
        return pairs
    }
}
