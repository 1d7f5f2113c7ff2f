import { KafkaJSNonRetriableError, KafkaJSProtocolError } from 'kafkajs';

/** A broker's answer as kafkajs raises it. */
export function brokerAnswer(type: string, code: number): KafkaJSProtocolError {
  return new KafkaJSProtocolError(Object.assign(new Error(`broker answered ${type}`), { type, code, retriable: false }));
}

/** As kafkajs's retrier passes an answer it does not retry on: wrapped, the answer in `cause`. */
export const notRetried = (cause: Error): KafkaJSNonRetriableError => Object.assign(new KafkaJSNonRetriableError(cause), { cause });
