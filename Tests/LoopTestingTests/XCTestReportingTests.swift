import LoopTesting
import XCTest

/// The same specs, run from XCTest: a failing spec must fail the XCTest test it runs in.
final class XCTestReportingTests: XCTestCase {
    /// Failures this test expects; they are checked by the test rather than failing it.
    private var captured: [String] = []
    private var capturing = false

    override func recordFailure(
        withDescription description: String,
        inFile filePath: String,
        atLine lineNumber: Int,
        expected: Bool
    ) {
        if capturing {
            captured.append(description)
        } else {
            super.recordFailure(withDescription: description, inFile: filePath, atLine: lineNumber, expected: expected)
        }
    }

    func testMatchingSpecRecordsNoFailure() {
        capturing = true
        Jobs.spec.given(Jobs.State()).when(.pause).then(.state(Jobs.State(paused: true)), .noEffects)
        capturing = false
        XCTAssertEqual(captured, [])
    }

    func testMismatchingSpecFailsTheXCTestWithTheDifferingField() {
        capturing = true
        Jobs.spec.given(Jobs.State()).when(.pause).then(.state(Jobs.State(paused: false)))
        capturing = false
        XCTAssertEqual(captured.count, 1)
        XCTAssertTrue(captured.first?.contains("state.paused: expected false, actual true") ?? false, "\(captured)")
    }
}
