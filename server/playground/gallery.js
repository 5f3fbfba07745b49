// The examples the page offers: each a constraint kind, its text and a prompt.
export const GALLERY = [
  {
    id: "extraction", title: "Extraction (JSON Schema)", kind: "json_schema",
    prompt: "Extract the person from this text as a JSON object with keys name, age and email.\n" +
      "Text: Ada Lovelace, 36, can be reached at ada@example.com.",
    constraint: {
      type: "object",
      properties: {
        name: { type: "string" },
        age: { type: "integer", minimum: 0 },
        email: { type: "string", format: "email" },
      },
      required: ["name", "age", "email"],
      additionalProperties: false,
    },
  },
  {
    id: "classification", title: "Classification (choice)", kind: "choice",
    prompt: "Classify the sentiment of this review as positive, negative or neutral.\n" +
      "Review: The battery lasts all day and the screen is gorgeous.",
    constraint: "positive\nnegative\nneutral",
  },
  {
    id: "tool-call", title: "Tool call (tools)", kind: "tools",
    prompt: "What is the weather in Paris, in celsius? Answer with a JSON object " +
      '{"name": "get_weather", "arguments": {...}} calling the get_weather tool.',
    constraint: [{
      type: "function",
      function: {
        name: "get_weather",
        description: "Current weather for a city",
        parameters: {
          type: "object",
          properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
          required: ["city", "unit"],
        },
      },
    }],
  },
  {
    id: "date", title: "A date (regex)", kind: "regex",
    prompt: "When did Apollo 11 land on the Moon? Answer with the date only, as YYYY-MM-DD.",
    constraint: "[0-9]{4}-[0-9]{2}-[0-9]{2}",
  },
];

// The text the editor shows for an example's constraint.
export function constraintText(example) {
  return typeof example.constraint === "string" ? example.constraint : JSON.stringify(example.constraint, null, 2);
}
