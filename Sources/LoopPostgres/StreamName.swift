/// Stream names as the database keeps them: in Unicode's composed form (NFC).
///
/// Swift compares strings by their meaning, not their bytes: "é" written as one scalar and as "e" with
/// a combining accent are one string, one key of a dictionary, one entity of a group keyed by strings,
/// and one stream of the file store. PostgreSQL compares text by its bytes. So every name this module
/// sends the database is first put in the composed form, the one Swift itself compares by, and two
/// spellings of one name are one stream here too (and one shard, since a stream's shard is a hash of
/// the name the database holds). A row a program inserts into the inbox itself (`psql`) under another
/// spelling is moved to the composed name's shard by the node that finds it. Composing is done here
/// only, never by PostgreSQL's `normalize`, whose Unicode tables may be older than Swift's (and which
/// needs a UTF-8 database).
enum StreamName {
    /// Whether `name` is composed already.
    static func isCanonical(_ name: String) -> Bool {
        isASCII(name) || name.utf8.elementsEqual(name._nfcCodeUnits)
    }

    /// `name` in the composed form: itself when it is ASCII (every ASCII string is composed already).
    static func canonical(_ name: String) -> String {
        if isASCII(name) { return name }
        // The standard library's own composition, the one its string comparison uses (public, with an
        // underscore: there is no other spelling of it in the standard library yet).
        return String(decoding: name._nfcCodeUnits, as: UTF8.self)
    }

    private static func isASCII(_ name: String) -> Bool {
        !name.utf8.contains { $0 >= 0x80 }
    }
}

extension PostgresValue {
    /// A stream's name as a parameter: ``StreamName/canonical(_:)``.
    static func stream(_ name: String) -> PostgresValue { .text(StreamName.canonical(name)) }
}
