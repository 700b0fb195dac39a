internal import Testing
internal import XCTest

/// Where in a test a spec was written, so that a failure points at the spec's own line.
struct SourceSite: Sendable {
    var fileID: String
    var filePath: StaticString
    var line: UInt
    var column: UInt

    /// Reports `message` as a failure of the running test: to Swift Testing when a Swift Testing test
    /// is running on this task, to XCTest otherwise.
    func fail(_ message: String) {
        if Test.current != nil {
            Issue.record(
                Comment(rawValue: message),
                sourceLocation: SourceLocation(
                    fileID: fileID,
                    filePath: String(describing: filePath),
                    line: Int(line),
                    column: Int(column)
                )
            )
        } else {
            XCTFail(message, file: filePath, line: line)
        }
    }
}
