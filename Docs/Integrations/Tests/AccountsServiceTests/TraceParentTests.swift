import AccountsService
import Testing
import Tracing

/// The `traceparent` header as the W3C Trace Context specification reads it: version 00, a 32-digit
/// trace id and a 16-digit parent id (lowercase hexadecimal, not all zero), two digits of flags;
/// anything else is ignored, never an error.
@Suite struct TraceParentTests {
    let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func aValidHeaderIsReadAndWrittenBackUnchanged() throws {
        let parent = try #require(TraceParent(valid))
        #expect(parent.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(parent.parentID == "00f067aa0ba902b7")
        #expect(parent.flags == 1)
        #expect(parent.header == valid)
    }

    @Test(arguments: [
        "",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // another version
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // trace id all zero
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // parent id all zero
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  // trace id too short
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  // no flags
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",  // not hexadecimal
    ])
    func aHeaderThatDoesNotParseIsIgnored(header: String) {
        #expect(TraceParent(header) == nil)
    }

    @Test func itTravelsInTheServiceContext() throws {
        var context = ServiceContext.topLevel
        #expect(context.traceParent == nil)
        let parent = try #require(TraceParent(valid))
        context.traceParent = parent
        #expect(context.traceParent?.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
    }
}
