import Glibc

/// An entry of a keyed container: where its key's UTF-8 is, where its value starts.
struct KeyedEntry {
    var keyStart: Int
    var keyCount: Int
    var value: Int
}

/// Which entry of a long keyed container to look at first: the one after the last found,
/// since keys are mostly read in the order written (a dictionary's always).
final class KeyCursor {
    var next = 0
}

/// How a keyed container being decoded finds its entries.
///
/// A short container (most structs' fields, in a small value) is read through from its
/// first entry on each lookup: its few keys are found so faster than through a table made
/// for it, which takes an allocation per container. Any other gets the table, and a cursor
/// so that reading its keys in order is not quadratic.
struct KeyedEntries {
    /// Up to this many entries, within `shortBytes` of the value's end, no table: reading
    /// through the entries before a key is then cheap, whatever their values are.
    static let shortCount = 8
    static let shortBytes = 256

    /// Where the first entry (its key's length) is.
    let first: Int
    let count: Int
    /// Every entry, for a long container; empty for a short one.
    let table: [KeyedEntry]
    let cursor: KeyCursor?
    /// The entries' values' depth.
    let depth: Int
}

extension DecodingSource {
    /// The entries of the keyed container whose `count` entries start at `first`.
    func keyedEntries(from first: Int, count: Int, depth: Int) throws(PortActorError) -> KeyedEntries {
        guard count > KeyedEntries.shortCount || end - first > KeyedEntries.shortBytes else {
            return KeyedEntries(first: first, count: count, table: [], cursor: nil, depth: depth)
        }
        var reader = reader(at: first)
        var table: [KeyedEntry] = []
        table.reserveCapacity(count)
        for _ in 0..<count {
            let keyCount = try reader.count()
            let keyStart = try reader.advance(keyCount)
            table.append(KeyedEntry(keyStart: keyStart, keyCount: keyCount, value: reader.offset))
            try reader.skipValue(depth: depth)
        }
        return KeyedEntries(first: first, count: count, table: table, cursor: KeyCursor(), depth: depth)
    }

    /// Calls `body` with each entry in order until it returns false.
    private func forEach(_ entries: KeyedEntries, _ body: (KeyedEntry) -> Bool) {
        if entries.cursor != nil {
            for entry in entries.table where !body(entry) { return }
            return
        }
        // The value was checked whole before decoding began: a failure here only ends the walk.
        var reader = reader(at: entries.first)
        for _ in 0..<entries.count {
            guard let keyCount = try? reader.count(), let keyStart = try? reader.advance(keyCount) else { return }
            guard body(KeyedEntry(keyStart: keyStart, keyCount: keyCount, value: reader.offset)) else { return }
            guard (try? reader.skipValue(depth: entries.depth)) != nil else { return }
        }
    }

    /// The keys of `entries`, in order.
    func keys(of entries: KeyedEntries) -> [String] {
        var keys: [String] = []
        forEach(entries) { entry in
            keys.append(String(decoding: bytes[entry.keyStart..<entry.keyStart + entry.keyCount], as: UTF8.self))
            return true
        }
        return keys
    }

    /// Where the value under `key` starts among `entries`, if it is there: a short
    /// container read through from its first entry, a long one's table looked through from
    /// its cursor on. Not generic (the containers are, and run unspecialized).
    func find(_ key: String, in entries: KeyedEntries) -> Int? {
        var name = key
        return name.withUTF8 { utf8 in
            bytes.withUnsafeBufferPointer { bytes in
                func matches(_ entry: KeyedEntry) -> Bool {
                    entry.keyCount == utf8.count
                        && (utf8.isEmpty || memcmp(utf8.baseAddress!, bytes.baseAddress! + entry.keyStart, utf8.count) == 0)
                }
                guard let cursor = entries.cursor else {
                    var found: Int?
                    forEach(entries) { entry in
                        if matches(entry) { found = entry.value }
                        return found == nil
                    }
                    return found
                }
                let table = entries.table
                for step in 0..<table.count {
                    let index = (cursor.next + step) % table.count
                    guard matches(table[index]) else { continue }
                    cursor.next = index + 1
                    return table[index].value
                }
                return nil
            }
        }
    }
}
