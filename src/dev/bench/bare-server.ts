import Fastify from 'fastify';

/**
 * The baseline for the admission benchmark: the same framework, the same JSON-schema validation
 * and the same 202, with nothing behind it (no Redis, no Kafka).
 */
export async function startBareServer(port: number): Promise<() => Promise<void>> {
  const app = Fastify({ logger: false });
  app.post(
    '/v1/runs',
    {
      schema: {
        body: {
          type: 'object',
          required: ['workflow', 'input'],
          additionalProperties: false,
          properties: { workflow: { type: 'string', minLength: 1, maxLength: 63 }, input: {}, class: { type: 'string', enum: ['interactive', 'batch'] }, deadlineMs: { type: 'integer', minimum: 1 } },
        },
      },
    },
    async (_req, reply) => reply.code(202).send({ runId: 'baseline', status: 'queued', admission: 'admitted' }),
  );
  await app.listen({ host: '127.0.0.1', port });
  return () => app.close();
}
