package org.symmem4j.dl4j.train;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * The user's model as {@link ModelListeners} shows it to DL4J's listeners: a {@code MultiLayerNetwork} or a
 * {@code ComputationGraph} that a trainer keeps holding each step's state while the listeners run.
 */
public interface ListenedModel {

    /**
     * The DL4J model the listeners are given.
     *
     * @return the network or graph
     */
    Model model();

    /**
     * The listeners attached to the model (DL4J's {@code getListeners()}).
     *
     * @return the listeners, never null
     */
    List<TrainingListener> listeners();

    /**
     * Whether the model trains with truncated backpropagation through time (several updates per batch).
     *
     * @return true for {@code BackpropType.TruncatedBPTT}
     */
    boolean truncatedBptt();

    /**
     * Sets the model's input and labels to {@code batch}, as DL4J's fit does before an iteration; null clears them.
     *
     * @param batch a DataSet or MultiDataSet, or null
     */
    void setInputAndLabels(Object batch);

    /**
     * Sets the score {@code model.score()} reports.
     *
     * @param score the step's score
     */
    void setScore(double score);

    /**
     * The model's flat gradient view (one contiguous buffer outside workspaces).
     *
     * @return the gradient view
     */
    INDArray gradientView();

    /**
     * DL4J's iteration count.
     *
     * @return iterations trained
     */
    int iterationCount();

    /**
     * Sets DL4J's iteration count.
     *
     * @param count the count
     */
    void setIterationCount(int count);

    /**
     * DL4J's epoch count.
     *
     * @return epochs trained
     */
    int epochCount();

    /**
     * Makes {@code gradient()} return DL4J's view of the flat gradient view: one array per layer and
     * parameter, keyed as DL4J keys them, as a network has after computing a gradient. DL4J has no
     * setter for it (its fit sets the field while computing), so it is set by reflection.
     */
    default void exposeGradientView() {
        Map<String, INDArray> views = new LinkedHashMap<>();
        boolean network = model() instanceof MultiLayerNetwork;
        List<org.deeplearning4j.nn.api.Layer> layers = List.of(network ? ((MultiLayerNetwork) model()).getLayers()
                : ((ComputationGraph) model()).getLayers());
        for (int i = 0; i < layers.size(); i++) {
            org.deeplearning4j.nn.api.Layer l = layers.get(i);
            if (l.numParams() == 0) {
                continue;
            }
            String prefix = network ? String.valueOf(i) : l.conf().getLayer().getLayerName();
            Map<String, INDArray> perParam = l.conf().getLayer().initializer()
                    .getGradientsFromFlattened(l.conf(), l.getGradientsViewArray());
            perParam.forEach((param, view) -> views.put(prefix + "_" + param, view));
        }
        org.deeplearning4j.nn.gradient.DefaultGradient gradient = new org.deeplearning4j.nn.gradient.DefaultGradient(gradientView());
        views.forEach(gradient::setGradientFor);
        Class<?> type = network ? MultiLayerNetwork.class : ComputationGraph.class;
        try {
            java.lang.reflect.Field field = type.getDeclaredField("gradient");
            field.setAccessible(true);
            field.set(model(), gradient);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalStateException("cannot set " + type.getSimpleName() + ".gradient (expected DL4J 1.0.0-M2.1's"
                    + " protected field; found " + e + "): listeners that read model.gradient() need it (fix: use DL4J"
                    + " 1.0.0-M2.1, and with DL4J on the module path add --add-opens " + type.getPackageName()
                    + "=ALL-UNNAMED, or put DL4J on the class path)", e);
        }
    }
}
