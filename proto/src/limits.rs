//! Sizes every process agrees on. gRPC refuses a message over its decoder's limit as a whole,
//! which once made a connector with a huge tool list crash-loop its worker and one huge
//! manifest field break `connector available` for every connector: these limits turn that
//! into one clear refusal, and the clients of the kernel accept replies as large as the
//! kernel can build.

/// Most tools one connector may offer; a larger tool set is refused at commit.
pub const MAX_TOOLS: usize = 10_000;

/// Most bytes of tool definitions (each tool's name plus its JSON) one connector may offer;
/// a larger tool set is refused at commit.
pub const MAX_TOOL_SET_BYTES: usize = 4 * 1024 * 1024;

/// Largest request the kernel decodes: an offer at both limits, with room for its framing.
pub const MAX_KERNEL_REQUEST_BYTES: usize = 2 * MAX_TOOL_SET_BYTES;

/// Largest reply a client of the kernel decodes (`status`, `available`, the route stream):
/// the kernel is trusted, and these replies grow with the number of connectors.
pub const MAX_KERNEL_REPLY_BYTES: usize = 64 * 1024 * 1024;

/// Bytes a tool counts for against [`MAX_TOOL_SET_BYTES`].
pub fn tool_bytes(name: &str, definition_json: &str) -> usize {
    name.len() + definition_json.len()
}

/// Why a tool set of `tools` tools and `bytes` bytes is refused, or `None` when it fits.
pub fn tool_set_problem(tools: usize, bytes: usize) -> Option<String> {
    if tools <= MAX_TOOLS && bytes <= MAX_TOOL_SET_BYTES {
        return None;
    }
    Some(format!(
        "the tool set is too large: {tools} tools and {bytes} bytes of tool definitions \
         (limits: {MAX_TOOLS} tools, {MAX_TOOL_SET_BYTES} bytes); the upstream must offer \
         fewer or smaller tools"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_both_numbers() {
        assert_eq!(tool_set_problem(MAX_TOOLS, MAX_TOOL_SET_BYTES), None);
        let p = tool_set_problem(50_000, 10).unwrap_or_default();
        assert!(
            p.contains("50000 tools") && p.contains("limits: 10000 tools"),
            "{p}"
        );
        assert!(tool_set_problem(1, MAX_TOOL_SET_BYTES + 1).is_some());
    }
}
