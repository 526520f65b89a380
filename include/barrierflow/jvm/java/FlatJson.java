/*
 * The entry point Python calls (py4j, through the helper's own class loader) to decode a Kafka
 * record's value with FlatJsonDecoder: strings and columns only, no static call needed.
 */
package barrierflow.jvm;

import org.apache.spark.sql.Column;

public final class FlatJson {
  /** An instance, for callers that reach the class through its own class loader (py4j). */
  public FlatJson() {}

  /**
   * The struct {@code schemaJson} (a Spark StructType as JSON) decoded from binary column
   * {@code value}: equal to {@code fallback} (Spark's from_json of the same record to the same
   * struct) for every record, which is evaluated only where FlatJsonDecoder leaves the decision to it.
   */
  public Column decode(Column value, Column fallback, String schemaJson) {
    return FlatJsonDecoder.column(value, fallback, schemaJson);
  }
}
