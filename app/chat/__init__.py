"""Chat format beside the server: tools described in the prompt, the grammar of a forced call, and a reply
read back into text and tool calls as it streams. Imports the engine only."""
