// A parsed JSON or YAML value as an object to read fields from: anything else reads as empty.
export function record(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}
