// What an error says, whatever was thrown: the one wording every log line and message uses.
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
