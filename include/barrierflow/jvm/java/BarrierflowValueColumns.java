/*
 * barrierflow's value-column rewrite of a stateful aggregation's state (compiled by
 * barrierflow.jvm.helper against the Spark jars PySpark ships; see docs/upgrades.md).
 *
 * Spark's StateRewriter (the class behind StreamingCheckpointManager.repartition) reads every
 * state store of a checkpoint at batch V as raw rows (partition_key, key_bytes, value_bytes,
 * column_family_name) and writes them, per partition on the executors, as state version V+2 of
 * batch V+1, through an optional DataFrame => DataFrame transformation that must keep that raw
 * schema. This class is that transformation: it decodes each value as an UnsafeRow of the old
 * aggregation buffer and encodes it again, with an UnsafeProjection, as an UnsafeRow of the new
 * buffer: every new field either an old field (by position) or a declared default literal.
 * Keys, partitions and column families are left as they are; nothing is collected to the driver.
 * transfer() copies another checkpoint's state into this one as a new version, unchanged.
 */
package barrierflow.jvm;

import java.io.Serializable;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.StateRewriter;
import org.apache.spark.sql.types.*;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

public final class BarrierflowValueColumns {
  /** An instance, for callers that reach the class through its own class loader (py4j). */
  public BarrierflowValueColumns() {}

  /** A literal of type {@code type} parsed from {@code text} (the declared default), or null. */
  static Literal literal(String text, DataType type) {
    if (text == null) return Literal.create(null, type);
    Object value;
    if (type instanceof LongType) value = Long.parseLong(text.trim());
    else if (type instanceof IntegerType) value = Integer.parseInt(text.trim());
    else if (type instanceof ShortType) value = Short.parseShort(text.trim());
    else if (type instanceof ByteType) value = Byte.parseByte(text.trim());
    else if (type instanceof DoubleType) value = Double.parseDouble(text.trim());
    else if (type instanceof FloatType) value = Float.parseFloat(text.trim());
    else if (type instanceof BooleanType) value = Boolean.parseBoolean(text.trim());
    else if (type instanceof StringType) value = UTF8String.fromString(text);
    else if (type instanceof DecimalType) value = Decimal.apply(new BigDecimal(text.trim()));
    else throw new IllegalArgumentException("a default for a buffer field of type " + type.simpleString()
        + " is not supported");
    return Literal.create(value, type);
  }

  /** The per-partition conversion of raw state rows (serializable; the projection built per partition). */
  static final class Convert implements MapPartitionsFunction<Row, Row>, Serializable {
    private static final long serialVersionUID = 1L;
    private final String oldSchemaJson;
    private final String newSchemaJson;
    private final String[] plan;

    Convert(String oldSchemaJson, String newSchemaJson, String[] plan) {
      this.oldSchemaJson = oldSchemaJson;
      this.newSchemaJson = newSchemaJson;
      this.plan = plan;
    }

    @Override
    public Iterator<Row> call(Iterator<Row> rows) {
      StructType before = (StructType) DataType.fromJson(oldSchemaJson);
      StructType after = (StructType) DataType.fromJson(newSchemaJson);
      List<Expression> exprs = new ArrayList<>();
      for (int i = 0; i < plan.length; i++) {
        StructField field = after.fields()[i];
        String step = plan[i];
        if (step.startsWith("old:")) {
          int j = Integer.parseInt(step.substring(4));
          StructField source = before.fields()[j];
          exprs.add(new BoundReference(j, source.dataType(), source.nullable()));
        } else if (step.startsWith("default:")) {
          exprs.add(literal(step.substring(8), field.dataType()));
        } else {
          exprs.add(literal(null, field.dataType()));
        }
      }
      UnsafeProjection projection = UnsafeProjection.create(CollectionConverters.asScala(exprs).toSeq());
      int width = before.fields().length;
      return new Iterator<Row>() {
        @Override public boolean hasNext() { return rows.hasNext(); }

        @Override public Row next() {
          Row row = rows.next();
          if (!"default".equals(row.getString(3))) return row;  // aggregations keep one column family
          byte[] bytes = (byte[]) row.get(2);
          UnsafeRow value = new UnsafeRow(width);
          value.pointTo(bytes, bytes.length);
          byte[] converted = projection.apply(value).copy().getBytes();
          return RowFactory.create(row.get(0), row.get(1), converted, row.get(3));
        }
      };
    }
  }

  /** The DataFrame => DataFrame transformation StateRewriter applies to each store's raw rows. */
  static final class Transform extends AbstractFunction1<Dataset<Row>, Dataset<Row>> implements Serializable {
    private static final long serialVersionUID = 1L;
    private final Convert convert;

    Transform(Convert convert) { this.convert = convert; }

    @Override
    public Dataset<Row> apply(Dataset<Row> raw) {
      return raw.mapPartitions(convert, Encoders.row(raw.schema()));
    }
  }

  /**
   * Rewrite the state of the checkpoint at {@code checkpoint} read at batch {@code readBatch} into
   * state version {@code writeBatch} + 1 (the offset log must hold {@code writeBatch}) with the
   * active session, every aggregation value converted from {@code oldSchemaJson} to
   * {@code newSchemaJson} by {@code plan}: one line per new field, {@code old:<index>},
   * {@code default:<text>} or {@code null}. Strings only, so that py4j calls it through
   * reflection on this class's own class loader without argument conversions.
   */
  /**
   * Write the state the checkpoint at {@code readCheckpoint} holds at batch {@code readBatch} into
   * the checkpoint at {@code checkpoint} as state version {@code writeBatch} + 1 (its offset log must
   * hold {@code writeBatch}; its operator metadata and schema files must be the read side's), row
   * by row as stored: the rebuild of a stage's state by replay (see docs/upgrades.md).
   */
  public String transfer(String checkpoint, String readCheckpoint, String readBatch, String writeBatch) {
    SparkSession spark = SparkSession.active();
    Configuration conf = spark.sparkContext().hadoopConfiguration();
    new StateRewriter(spark, Long.parseLong(readBatch), Long.parseLong(writeBatch), checkpoint, conf,
        Option.apply(readCheckpoint), Option.empty(), Option.empty()).run();
    return "ok";
  }

  public String rewrite(String checkpoint, String readBatch, String writeBatch, String oldSchemaJson,
                        String newSchemaJson, String plan) {
    SparkSession spark = SparkSession.active();
    Configuration conf = spark.sparkContext().hadoopConfiguration();
    Transform transform = new Transform(new Convert(oldSchemaJson, newSchemaJson, plan.split("\n", -1)));
    new StateRewriter(spark, Long.parseLong(readBatch), Long.parseLong(writeBatch), checkpoint, conf,
        Option.empty(), Option.apply(transform), Option.empty()).run();
    return "ok";
  }
}
